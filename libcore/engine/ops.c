/* ops.c - facts about an op that the graph core and the backends ask for: its
 * name, and whether it is one of the elementwise ops a backend runs through
 * one kernel. Below every builder: calls nothing. */
#include "ops.h"

const char *col_op_name(col_op op)
{
    static const char *const names[COL_OP_COUNT] = {
        [COL_OP_LEAF] = "leaf", [COL_OP_VIEW] = "view", [COL_OP_COPY] = "copy", [COL_OP_CAST] = "cast",
        [COL_OP_FILL] = "fill", [COL_OP_ACCUMULATE] = "accumulate", [COL_OP_SCATTER_SLICE] = "scatter_slice",
        [COL_OP_ADD] = "add", [COL_OP_SUB] = "sub", [COL_OP_MUL] = "mul", [COL_OP_DIV] = "div",
        [COL_OP_SCALE] = "scale", [COL_OP_EXP] = "exp", [COL_OP_LOG] = "log", [COL_OP_TANH] = "tanh",
        [COL_OP_SIGMOID] = "sigmoid", [COL_OP_RELU] = "relu", [COL_OP_GELU_ERF] = "gelu",
        [COL_OP_GELU_TANH] = "gelu_tanh", [COL_OP_SILU] = "silu", [COL_OP_SWIGLU] = "swiglu",
        [COL_OP_TANH_BWD] = "tanh_bwd", [COL_OP_SIGMOID_BWD] = "sigmoid_bwd", [COL_OP_RELU_BWD] = "relu_bwd",
        [COL_OP_GELU_ERF_BWD] = "gelu_bwd", [COL_OP_GELU_TANH_BWD] = "gelu_tanh_bwd",
        [COL_OP_SILU_BWD] = "silu_bwd", [COL_OP_SWIGLU_BWD] = "swiglu_bwd", [COL_OP_SUM] = "sum",
        [COL_OP_MEAN] = "mean", [COL_OP_MAX] = "max", [COL_OP_MAX_BWD] = "max_bwd", [COL_OP_SOFTMAX] = "softmax",
        [COL_OP_SOFTMAX_BWD] = "softmax_bwd", [COL_OP_LOG_SOFTMAX] = "log_softmax",
        [COL_OP_LOG_SOFTMAX_BWD] = "log_softmax_bwd", [COL_OP_LAYERNORM] = "layernorm",
        [COL_OP_LAYERNORM_BWD] = "layernorm_bwd", [COL_OP_RMSNORM] = "rmsnorm", [COL_OP_RMSNORM_BWD] = "rmsnorm_bwd",
        [COL_OP_EMBEDDING] = "embedding", [COL_OP_EMBEDDING_BWD] = "embedding_bwd", [COL_OP_ROPE] = "rope",
        [COL_OP_ATTENTION] = "attention", [COL_OP_ATTENTION_BWD] = "attention_bwd",
        [COL_OP_CROSS_ENTROPY] = "cross_entropy", [COL_OP_CROSS_ENTROPY_BWD] = "cross_entropy_bwd",
        [COL_OP_DROPOUT] = "dropout", [COL_OP_CONCAT] = "concat", [COL_OP_MATMUL] = "matmul",
        [COL_OP_ARANGE] = "arange", [COL_OP_KV_WRITE] = "kv_write",
        [COL_OP_CONV2D] = "conv2d", [COL_OP_CONV2D_BWD_DATA] = "conv2d_bwd_data",
        [COL_OP_CONV2D_BWD_FILTER] = "conv2d_bwd_filter", [COL_OP_UPSAMPLE_NEAREST] = "upsample_nearest",
        [COL_OP_UPSAMPLE_NEAREST_BWD] = "upsample_nearest_bwd", [COL_OP_EXTERN] = "extern",
        [COL_OP_TOKEN_LOGPROB] = "token_logprob", [COL_OP_TOKEN_LOGPROB_BWD] = "token_logprob_bwd",
    };
    if ((unsigned)op < COL_OP_COUNT && names[op])
        return names[op];
    return "?";
}

bool col_op_is_elementwise(col_op op)
{
    switch (op) {
    case COL_OP_EXP: case COL_OP_LOG: case COL_OP_TANH: case COL_OP_SIGMOID: case COL_OP_RELU:
    case COL_OP_GELU_ERF: case COL_OP_GELU_TANH: case COL_OP_SILU: case COL_OP_SWIGLU:
    case COL_OP_TANH_BWD: case COL_OP_SIGMOID_BWD: case COL_OP_RELU_BWD: case COL_OP_GELU_ERF_BWD:
    case COL_OP_GELU_TANH_BWD: case COL_OP_SILU_BWD: case COL_OP_SWIGLU_BWD: case COL_OP_DROPOUT: return true;
    default: return false;
    }
}
