/* PLACEHOLDER: being written */
#include "cpu_internal.h"
void col_cpu_register_norm(col_backend *be) { (void)be; }
