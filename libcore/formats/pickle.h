/* pickle.h - a minimal pickle reader for PyTorch state dicts.
 *
 * This is not Python's unpickler: it never calls anything. It runs the
 * small subset of pickle opcodes that torch.save writes for a state dict and
 * builds a tree (a DAG when the memo shares objects) of plain values:
 * None, bool, int, float, str, tuple, list, dict, global references,
 * persistent ids and "calls" -- a REDUCE of an allowed global is recorded
 * as (callable, args) for the caller to interpret, never executed. The one
 * exception is collections.OrderedDict() with no arguments, which becomes an
 * empty dict so that SETITEMS can fill it.
 *
 * Every opcode outside the subset (INST, OBJ, NEWOBJ, EXT*, the text
 * opcodes, ...) is refused with an error that names it, and every global is
 * checked against the caller's allow-list the moment the pickle names it.
 * All reads are bounds-checked; the stack, the mark stack, the memo, string
 * lengths and container sizes are bounded.
 */
#ifndef COL_PICKLE_H
#define COL_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef enum {
    COL_PK_NONE,
    COL_PK_BOOL,    /* i: 0 or 1 */
    COL_PK_INT,     /* i (ints needing more than 64 bits are refused) */
    COL_PK_FLOAT,   /* f */
    COL_PK_STR,     /* s, slen (UTF-8 bytes, NUL-terminated, may hold NULs) */
    COL_PK_TUPLE,   /* items[0..n) */
    COL_PK_LIST,    /* items[0..n) */
    COL_PK_DICT,    /* items[2k] = key, items[2k+1] = value, k < n; insertion
                     * order, duplicates kept (last one wins in Python) */
    COL_PK_GLOBAL,  /* module, name (allowed by the caller's allow-list) */
    COL_PK_CALL,    /* func (a COL_PK_GLOBAL) applied to args (a COL_PK_TUPLE) */
    COL_PK_PERSID,  /* args: the persistent id object (BINPERSID) */
} col_pk_kind;

typedef struct col_pk_obj col_pk_obj;
struct col_pk_obj {
    col_pk_kind kind;
    int64_t i;
    double f;
    const char *s;
    size_t slen;
    const char *module, *name;
    col_pk_obj **items;
    size_t n, cap;
    const col_pk_obj *func, *args;
    const col_pk_obj *state;      /* dict: the BUILD state, if any (else NULL) */
};

/* Decides whether the pickle may refer to module.name. */
typedef bool (*col_pk_allow_fn)(const char *module, const char *name, void *user);

typedef struct col_pk col_pk;   /* owns every object of one load */

/* Runs the pickle in data[0..len) up to STOP. what prefixes every error
 * message (e.g. "model.bin: data.pkl"). On success *root is the value left
 * on the stack and *out owns it (free with col_pk_free). Errors are
 * COL_EFORMAT (malformed, refused opcode or global) or COL_ENOMEM. */
col_status col_pk_load(const void *data, size_t len, const char *what, col_pk_allow_fn allow, void *user,
                       col_pk **out, const col_pk_obj **root, col_err *err);
void col_pk_free(col_pk *p);
/* Number of objects the load created (bounds tree walks over the result). */
size_t col_pk_count(const col_pk *p);

/* "None", "int", "dict", ... for messages. */
const char *col_pk_kind_name(col_pk_kind k);
/* The opcode's name ("REDUCE", "INST", ...) or "unknown". */
const char *col_pk_opcode_name(uint8_t op);

#endif
