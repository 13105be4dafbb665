/* plan_probe.c - stub */
#include "plan_probe.h"
