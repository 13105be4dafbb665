/* PLACEHOLDER: being written */
#include "graph_internal.h"
void col_bwd_unary(col_graph *g, col_node *n, col_node *d) { (void)n; (void)d; col_graph_fail(g, COL_EUNSUPPORTED, "todo"); }
void col_bwd_dropout(col_graph *g, col_node *n, col_node *d) { (void)n; (void)d; col_graph_fail(g, COL_EUNSUPPORTED, "todo"); }
