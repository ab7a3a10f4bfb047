// STUB: replaced this session.
#include "topology/select.h"
