// STUB: replaced this session.
#include "topology/cost.h"
