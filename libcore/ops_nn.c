/* PLACEHOLDER: being written */
#include "graph_internal.h"
void col_bwd_embedding(col_graph *g, col_node *n, col_node *d) { (void)n; (void)d; col_graph_fail(g, COL_EUNSUPPORTED, "todo"); }
void col_bwd_rope(col_graph *g, col_node *n, col_node *d) { (void)n; (void)d; col_graph_fail(g, COL_EUNSUPPORTED, "todo"); }
void col_bwd_cross_entropy(col_graph *g, col_node *n, col_node *d) { (void)n; (void)d; col_graph_fail(g, COL_EUNSUPPORTED, "todo"); }
