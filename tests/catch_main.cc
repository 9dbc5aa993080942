#define CATCH_CONFIG_MAIN
#include "ddprun_catch.h"
