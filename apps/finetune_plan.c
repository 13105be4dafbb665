/* finetune_plan.c - stub */
#include "finetune.h"
