// Catch2's main, for machines without Debian's prebuilt libCatch2WithMain (meson option catch2_dir).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
