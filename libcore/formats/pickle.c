/* pickle.c - a minimal, non-executing pickle machine for state dicts.
 *
 * See pickle.h. The machine keeps Python's unpickler semantics for the
 * opcodes it supports (including the per-MARK stack frames of Python 3:
 * nothing below the last MARK can be popped until POP_MARK-like opcodes
 * consume it) but builds inert objects only. Objects live in an arena owned
 * by the col_pk result and are freed all at once.
 */
#include "pickle.h"

#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PK_MAX_STACK (1u << 20)   /* values on the stack */
#define PK_MAX_MARKS 4096u        /* nested MARKs */
#define PK_MAX_MEMO (1u << 22)    /* memo indices */
#define PK_MAX_STR (1u << 20)     /* bytes in one string */
#define PK_MAX_ITEMS (1u << 22)   /* entries in one list or dict */
#define PK_MAX_NAME 256           /* bytes in a GLOBAL's module or name */

/* ---- arena ---- */

typedef struct pk_chunk {
    struct pk_chunk *next;
    size_t used, cap;
    alignas(max_align_t) unsigned char data[];
} pk_chunk;

struct col_pk {
    pk_chunk *chunks;
    size_t nobj;
};

static void *pk_alloc(col_pk *p, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    pk_chunk *c = p->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > (64u << 10) ? n : (64u << 10);
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = p->chunks;
        p->chunks = c;
    }
    void *r = c->data + c->used;
    c->used += n;
    return r;
}

void col_pk_free(col_pk *p)
{
    if (!p)
        return;
    pk_chunk *c = p->chunks;
    while (c) {
        pk_chunk *next = c->next;
        free(c);
        c = next;
    }
    free(p);
}

size_t col_pk_count(const col_pk *p) { return p ? p->nobj : 0; }

/* ---- names ---- */

const char *col_pk_kind_name(col_pk_kind k)
{
    switch (k) {
    case COL_PK_NONE: return "None";
    case COL_PK_BOOL: return "bool";
    case COL_PK_INT: return "int";
    case COL_PK_FLOAT: return "float";
    case COL_PK_STR: return "str";
    case COL_PK_TUPLE: return "tuple";
    case COL_PK_LIST: return "list";
    case COL_PK_DICT: return "dict";
    case COL_PK_GLOBAL: return "global";
    case COL_PK_CALL: return "call";
    case COL_PK_PERSID: return "persistent id";
    }
    return "?";
}

const char *col_pk_opcode_name(uint8_t op)
{
    switch (op) {
    case '(': return "MARK";
    case '.': return "STOP";
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    case 'F': return "FLOAT";
    case 'I': return "INT";
    case 'J': return "BININT";
    case 'K': return "BININT1";
    case 'L': return "LONG";
    case 'M': return "BININT2";
    case 'N': return "NONE";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 'R': return "REDUCE";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'X': return "BINUNICODE";
    case 'a': return "APPEND";
    case 'b': return "BUILD";
    case 'c': return "GLOBAL";
    case 'd': return "DICT";
    case '}': return "EMPTY_DICT";
    case 'e': return "APPENDS";
    case 'g': return "GET";
    case 'h': return "BINGET";
    case 'i': return "INST";
    case 'j': return "LONG_BINGET";
    case 'l': return "LIST";
    case ']': return "EMPTY_LIST";
    case 'o': return "OBJ";
    case 'p': return "PUT";
    case 'q': return "BINPUT";
    case 'r': return "LONG_BINPUT";
    case 's': return "SETITEM";
    case 't': return "TUPLE";
    case ')': return "EMPTY_TUPLE";
    case 'u': return "SETITEMS";
    case 'G': return "BINFLOAT";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x80: return "PROTO";
    case 0x81: return "NEWOBJ";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x85: return "TUPLE1";
    case 0x86: return "TUPLE2";
    case 0x87: return "TUPLE3";
    case 0x88: return "NEWTRUE";
    case 0x89: return "NEWFALSE";
    case 0x8a: return "LONG1";
    case 0x8b: return "LONG4";
    case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8";
    case 0x8e: return "BINBYTES8";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x92: return "NEWOBJ_EX";
    case 0x93: return "STACK_GLOBAL";
    case 0x94: return "MEMOIZE";
    case 0x95: return "FRAME";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    }
    return "unknown";
}

/* ---- the machine ---- */

typedef struct {
    col_pk *pk;
    const uint8_t *base, *p, *end;
    const uint8_t *op_at;           /* start of the current opcode */
    const char *what;
    col_pk_allow_fn allow;
    void *user;
    col_err *err;
    col_pk_obj **stack;
    size_t sp, stack_cap;
    size_t *marks;
    size_t nmarks;
    col_pk_obj **memo;
    size_t memo_cap;
    size_t memo_count;              /* distinct indices set (MEMOIZE uses it) */
    col_pk_obj *none, *yes, *no;
} pk_vm;

static col_status vm_fail(pk_vm *vm, const char *msg)
{
    uint8_t op = *vm->op_at;
    return col_err_set(vm->err, COL_EFORMAT, "%s: byte %zu (%s): %s", vm->what, (size_t)(vm->op_at - vm->base),
                       col_pk_opcode_name(op), msg);
}

static col_status vm_nomem(pk_vm *vm)
{
    return col_err_set(vm->err, COL_ENOMEM, "%s: out of memory while reading the pickle", vm->what);
}

static col_pk_obj *vm_new(pk_vm *vm, col_pk_kind kind)
{
    col_pk_obj *o = pk_alloc(vm->pk, sizeof *o);
    if (!o)
        return NULL;
    memset(o, 0, sizeof *o);
    o->kind = kind;
    vm->pk->nobj++;
    return o;
}

/* Reads n bytes; NULL (and an error) when fewer remain. */
static const uint8_t *vm_take(pk_vm *vm, size_t n)
{
    if ((size_t)(vm->end - vm->p) < n) {
        vm_fail(vm, "the pickle ends in the middle of this opcode (truncated?)");
        return NULL;
    }
    const uint8_t *r = vm->p;
    vm->p += n;
    return r;
}

static uint64_t rd_le(const uint8_t *b, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

/* An opcode's n-byte little-endian argument in *v; COL_EFORMAT (and an error) when fewer bytes remain. */
static col_status vm_arg(pk_vm *vm, int n, uint64_t *v)
{
    const uint8_t *b = vm_take(vm, (size_t)n);
    if (!b)
        return COL_EFORMAT;
    *v = rd_le(b, n);
    return COL_OK;
}

static col_status vm_push(pk_vm *vm, col_pk_obj *o)
{
    if (!o)
        return vm_nomem(vm);
    if (vm->sp == vm->stack_cap) {
        if (vm->stack_cap >= PK_MAX_STACK)
            return vm_fail(vm, "the pickle stack grows past its limit");
        size_t cap = vm->stack_cap ? 2 * vm->stack_cap : 64;
        col_pk_obj **s = realloc(vm->stack, cap * sizeof *s);
        if (!s)
            return vm_nomem(vm);
        vm->stack = s;
        vm->stack_cap = cap;
    }
    vm->stack[vm->sp++] = o;
    return COL_OK;
}

/* Where the current frame starts: Python 3 cannot pop below the last MARK. */
static size_t vm_base(const pk_vm *vm)
{
    return vm->nmarks ? vm->marks[vm->nmarks - 1] : 0;
}

static size_t vm_avail(const pk_vm *vm)
{
    return vm->sp - vm_base(vm);
}

static col_pk_obj *vm_pop(pk_vm *vm)
{
    if (vm_avail(vm) == 0) {
        vm_fail(vm, "the pickle stack is empty");
        return NULL;
    }
    return vm->stack[--vm->sp];
}

static col_pk_obj *vm_top(pk_vm *vm)
{
    if (vm_avail(vm) == 0) {
        vm_fail(vm, "the pickle stack is empty");
        return NULL;
    }
    return vm->stack[vm->sp - 1];
}

/* Ends the frame opened by the last MARK: returns where it started. */
static col_status vm_pop_mark(pk_vm *vm, size_t *start)
{
    if (vm->nmarks == 0)
        return vm_fail(vm, "no MARK on the stack");
    *start = vm->marks[--vm->nmarks];
    return COL_OK;
}

static col_status vm_tuple_from(pk_vm *vm, size_t start)
{
    size_t n = vm->sp - start;
    col_pk_obj *t = vm_new(vm, COL_PK_TUPLE);
    if (!t)
        return vm_nomem(vm);
    if (n) {
        t->items = pk_alloc(vm->pk, n * sizeof *t->items);
        if (!t->items)
            return vm_nomem(vm);
        memcpy(t->items, vm->stack + start, n * sizeof *t->items);
    }
    t->n = t->cap = n;
    vm->sp = start;
    return vm_push(vm, t);
}

/* Appends k objects to a list or dict's item array. */
static col_status vm_extend(pk_vm *vm, col_pk_obj *c, col_pk_obj *const *src, size_t k)
{
    size_t have = c->kind == COL_PK_DICT ? 2 * c->n : c->n;
    if (have + k > PK_MAX_ITEMS)
        return vm_fail(vm, "a list or dict grows past its limit");
    if (have + k > c->cap) {
        size_t cap = c->cap ? c->cap : 8;
        while (cap < have + k)
            cap *= 2;
        col_pk_obj **items = pk_alloc(vm->pk, cap * sizeof *items);
        if (!items)
            return vm_nomem(vm);
        if (have)
            memcpy(items, c->items, have * sizeof *items);
        c->items = items;
        c->cap = cap;
    }
    memcpy(c->items + have, src, k * sizeof *src);
    c->n += c->kind == COL_PK_DICT ? k / 2 : k;
    return COL_OK;
}

static bool hashable(const col_pk_obj *o)
{
    return o->kind != COL_PK_LIST && o->kind != COL_PK_DICT;
}

static col_status vm_setitems(pk_vm *vm, col_pk_obj *d, size_t start)
{
    if (d->kind != COL_PK_DICT)
        return vm_fail(vm, "SETITEM(S) on something that is not a dict");
    size_t k = vm->sp - start;
    if (k % 2)
        return vm_fail(vm, "SETITEMS with an odd number of values");
    for (size_t i = start; i < vm->sp; i += 2)
        if (!hashable(vm->stack[i]))
            return vm_fail(vm, "a dict key is a list or dict");
    col_status st = vm_extend(vm, d, vm->stack + start, k);
    vm->sp = start;
    return st;
}

static col_status vm_memo_put(pk_vm *vm, uint64_t idx)
{
    col_pk_obj *top = vm_top(vm);
    if (!top)
        return COL_EFORMAT;
    if (idx >= PK_MAX_MEMO || idx > (uint64_t)(vm->end - vm->base))
        return vm_fail(vm, "memo index out of range");
    if (idx >= vm->memo_cap) {
        size_t cap = vm->memo_cap ? vm->memo_cap : 64;
        while (cap <= idx)
            cap *= 2;
        col_pk_obj **m = realloc(vm->memo, cap * sizeof *m);
        if (!m)
            return vm_nomem(vm);
        memset(m + vm->memo_cap, 0, (cap - vm->memo_cap) * sizeof *m);
        vm->memo = m;
        vm->memo_cap = cap;
    }
    if (!vm->memo[idx])
        vm->memo_count++;
    vm->memo[idx] = top;
    return COL_OK;
}

static col_status vm_memo_get(pk_vm *vm, uint64_t idx)
{
    if (idx >= vm->memo_cap || !vm->memo[idx])
        return vm_fail(vm, "memo index that was never set");
    return vm_push(vm, vm->memo[idx]);
}

static bool name_ok(const char *s, size_t n)
{
    if (n == 0 || n > PK_MAX_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~')
            return false;
    return true;
}

static col_status vm_global(pk_vm *vm, const char *mod, size_t mlen, const char *name, size_t nlen)
{
    if (!name_ok(mod, mlen) || !name_ok(name, nlen))
        return vm_fail(vm, "a global's module or name is empty, too long or not printable ASCII");
    col_pk_obj *g = vm_new(vm, COL_PK_GLOBAL);
    char *m = pk_alloc(vm->pk, mlen + 1), *nm = pk_alloc(vm->pk, nlen + 1);
    if (!g || !m || !nm)
        return vm_nomem(vm);
    memcpy(m, mod, mlen);
    m[mlen] = '\0';
    memcpy(nm, name, nlen);
    nm[nlen] = '\0';
    if (!vm->allow(m, nm, vm->user))
        return col_err_set(vm->err, COL_EFORMAT,
                           "%s: the pickle refers to %s.%s; only state-dict contents are allowed, "
                           "this file may be malicious", vm->what, m, nm);
    g->module = m;
    g->name = nm;
    return vm_push(vm, g);
}

/* GLOBAL's operand: "module\nname\n". */
static col_status vm_read_line(pk_vm *vm, const char **s, size_t *n)
{
    const uint8_t *nl = memchr(vm->p, '\n', (size_t)(vm->end - vm->p));
    if (!nl)
        return vm_fail(vm, "GLOBAL without a newline (truncated?)");
    *s = (const char *)vm->p;
    *n = (size_t)(nl - vm->p);
    vm->p = nl + 1;
    return COL_OK;
}

static col_status vm_string(pk_vm *vm, uint64_t n)
{
    if (n > PK_MAX_STR)
        return vm_fail(vm, "string longer than 1 MiB");
    const uint8_t *b = vm_take(vm, (size_t)n);
    if (!b)
        return COL_EFORMAT;
    col_pk_obj *o = vm_new(vm, COL_PK_STR);
    char *s = o ? pk_alloc(vm->pk, (size_t)n + 1) : NULL;
    if (!s)
        return vm_nomem(vm);
    if (n)
        memcpy(s, b, (size_t)n);
    s[n] = '\0';
    o->s = s;
    o->slen = (size_t)n;
    return vm_push(vm, o);
}

static col_status vm_int(pk_vm *vm, int64_t v)
{
    col_pk_obj *o = vm_new(vm, COL_PK_INT);
    if (o)
        o->i = v;
    return vm_push(vm, o);
}

static col_status vm_reduce(pk_vm *vm)
{
    col_pk_obj *args = vm_pop(vm);
    col_pk_obj *func = args ? vm_pop(vm) : NULL;
    if (!func)
        return COL_EFORMAT;
    if (func->kind != COL_PK_GLOBAL)
        return vm_fail(vm, "REDUCE of something that is not a global");
    if (args->kind != COL_PK_TUPLE)
        return vm_fail(vm, "REDUCE with arguments that are not a tuple");
    if (!strcmp(func->module, "collections") && !strcmp(func->name, "OrderedDict")) {
        if (args->n != 0)
            return vm_fail(vm, "collections.OrderedDict called with arguments");
        return vm_push(vm, vm_new(vm, COL_PK_DICT));
    }
    col_pk_obj *c = vm_new(vm, COL_PK_CALL);
    if (c) {
        c->func = func;
        c->args = args;
    }
    return vm_push(vm, c);
}

static col_status vm_step(pk_vm *vm, uint8_t op, bool *stop)
{
    const uint8_t *b;
    col_pk_obj *o, *v, *k;
    size_t start = 0;
    uint64_t u;
    col_status st;
    switch (op) {
    case 0x80: /* PROTO */
        if ((st = vm_arg(vm, 1, &u)))
            return st;
        if (u < 2 || u > 5)
            return vm_fail(vm, "pickle protocol outside 2..5");
        return COL_OK;
    case 0x95: /* FRAME: a length hint; the opcodes follow inline */
        if ((st = vm_arg(vm, 8, &u)))
            return st;
        if (u > (uint64_t)(vm->end - vm->p))
            return vm_fail(vm, "FRAME longer than the rest of the pickle");
        return COL_OK;
    case '.': /* STOP */
        *stop = true;
        return COL_OK;
    case '(': /* MARK */
        if (vm->nmarks >= PK_MAX_MARKS)
            return vm_fail(vm, "too many nested MARKs");
        vm->marks[vm->nmarks++] = vm->sp;
        return COL_OK;
    case '}': return vm_push(vm, vm_new(vm, COL_PK_DICT));
    case ']': return vm_push(vm, vm_new(vm, COL_PK_LIST));
    case ')': return vm_tuple_from(vm, vm->sp);
    case 't': /* TUPLE */
        if ((st = vm_pop_mark(vm, &start)))
            return st;
        return vm_tuple_from(vm, start);
    case 0x85: case 0x86: case 0x87: { /* TUPLE1..3 */
        size_t n = (size_t)(op - 0x84);
        if (vm_avail(vm) < n)
            return vm_fail(vm, "not enough values on the stack");
        return vm_tuple_from(vm, vm->sp - n);
    }
    /* the opcodes with a length or value of 1, 2, 4 or 8 bytes */
    case 'X': /* BINUNICODE */
        return (st = vm_arg(vm, 4, &u)) ? st : vm_string(vm, u);
    case 0x8c: /* SHORT_BINUNICODE */
        return (st = vm_arg(vm, 1, &u)) ? st : vm_string(vm, u);
    case 0x8d: /* BINUNICODE8 */
        return (st = vm_arg(vm, 8, &u)) ? st : vm_string(vm, u);
    case 'J': /* BININT: signed */
        return (st = vm_arg(vm, 4, &u)) ? st : vm_int(vm, (int32_t)(uint32_t)u);
    case 'K': /* BININT1 */
        return (st = vm_arg(vm, 1, &u)) ? st : vm_int(vm, (int64_t)u);
    case 'M': /* BININT2 */
        return (st = vm_arg(vm, 2, &u)) ? st : vm_int(vm, (int64_t)u);
    case 0x8a: { /* LONG1: little-endian two's complement */
        if (!(b = vm_take(vm, 1)))
            return COL_EFORMAT;
        int n = b[0];
        if (n > 8)
            return vm_fail(vm, "integer wider than 64 bits");
        if (!(b = vm_take(vm, (size_t)n)))
            return COL_EFORMAT;
        uint64_t u = rd_le(b, n);
        if (n > 0 && n < 8 && (b[n - 1] & 0x80))
            u |= ~(uint64_t)0 << (8 * n);    /* sign-extend */
        return vm_int(vm, (int64_t)u);
    }
    case 'G': { /* BINFLOAT: big-endian double */
        if (!(b = vm_take(vm, 8)))
            return COL_EFORMAT;
        uint64_t u = 0;
        for (int i = 0; i < 8; i++)
            u = (u << 8) | b[i];
        o = vm_new(vm, COL_PK_FLOAT);
        if (o)
            memcpy(&o->f, &u, sizeof u);
        return vm_push(vm, o);
    }
    case 0x88: return vm_push(vm, vm->yes);
    case 0x89: return vm_push(vm, vm->no);
    case 'N': return vm_push(vm, vm->none);
    case 'c': { /* GLOBAL */
        const char *m = NULL, *n = NULL;
        size_t ml = 0, nl = 0;
        if ((st = vm_read_line(vm, &m, &ml)) || (st = vm_read_line(vm, &n, &nl)))
            return st;
        return vm_global(vm, m, ml, n, nl);
    }
    case 0x93: /* STACK_GLOBAL */
        v = vm_pop(vm);
        k = v ? vm_pop(vm) : NULL;
        if (!k)
            return COL_EFORMAT;
        if (k->kind != COL_PK_STR || v->kind != COL_PK_STR)
            return vm_fail(vm, "STACK_GLOBAL needs two strings");
        return vm_global(vm, k->s, k->slen, v->s, v->slen);
    case 'R': return vm_reduce(vm);
    case 'b': /* BUILD: a dict's state (OrderedDict's __dict__) is kept aside */
        v = vm_pop(vm);
        o = v ? vm_top(vm) : NULL;
        if (!o)
            return COL_EFORMAT;
        if (o->kind != COL_PK_DICT)
            return vm_fail(vm, "BUILD on something that is not a dict");
        o->state = v;
        return COL_OK;
    case 's': /* SETITEM */
        if (vm_avail(vm) < 3)
            return vm_fail(vm, "not enough values on the stack");
        return vm_setitems(vm, vm->stack[vm->sp - 3], vm->sp - 2);
    case 'u': /* SETITEMS */
        if ((st = vm_pop_mark(vm, &start)))
            return st;
        if (start <= vm_base(vm))
            return vm_fail(vm, "SETITEMS without a dict below the MARK");
        return vm_setitems(vm, vm->stack[start - 1], start);
    case 'a': /* APPEND */
        if (vm_avail(vm) < 2)
            return vm_fail(vm, "not enough values on the stack");
        o = vm->stack[vm->sp - 2];
        if (o->kind != COL_PK_LIST)
            return vm_fail(vm, "APPEND to something that is not a list");
        if ((st = vm_extend(vm, o, vm->stack + vm->sp - 1, 1)))
            return st;
        vm->sp--;
        return COL_OK;
    case 'e': /* APPENDS */
        if ((st = vm_pop_mark(vm, &start)))
            return st;
        if (start <= vm_base(vm))
            return vm_fail(vm, "APPENDS without a list below the MARK");
        o = vm->stack[start - 1];
        if (o->kind != COL_PK_LIST)
            return vm_fail(vm, "APPENDS to something that is not a list");
        if ((st = vm_extend(vm, o, vm->stack + start, vm->sp - start)))
            return st;
        vm->sp = start;
        return COL_OK;
    case 'q': /* BINPUT */
        return (st = vm_arg(vm, 1, &u)) ? st : vm_memo_put(vm, u);
    case 'r': /* LONG_BINPUT */
        return (st = vm_arg(vm, 4, &u)) ? st : vm_memo_put(vm, u);
    case 0x94: /* MEMOIZE */
        return vm_memo_put(vm, vm->memo_count);
    case 'h': /* BINGET */
        return (st = vm_arg(vm, 1, &u)) ? st : vm_memo_get(vm, u);
    case 'j': /* LONG_BINGET */
        return (st = vm_arg(vm, 4, &u)) ? st : vm_memo_get(vm, u);
    case 'Q': /* BINPERSID */
        if (!(v = vm_pop(vm)))
            return COL_EFORMAT;
        o = vm_new(vm, COL_PK_PERSID);
        if (o)
            o->args = v;
        return vm_push(vm, o);
    default: {
        char msg[128];
        if (op >= 0x20 && op < 0x7f)
            snprintf(msg, sizeof msg, "pickle opcode 0x%02x ('%c', %s) is not allowed in a state dict", op, op,
                     col_pk_opcode_name(op));
        else
            snprintf(msg, sizeof msg, "pickle opcode 0x%02x (%s) is not allowed in a state dict", op,
                     col_pk_opcode_name(op));
        return col_err_set(vm->err, COL_EFORMAT, "%s: byte %zu: %s", vm->what, (size_t)(vm->op_at - vm->base), msg);
    }
    }
}

col_status col_pk_load(const void *data, size_t len, const char *what, col_pk_allow_fn allow, void *user,
                       col_pk **out, const col_pk_obj **root, col_err *err)
{
    *out = NULL;
    *root = NULL;
    if (!what)
        what = "pickle";
    pk_vm vm = {.base = data, .p = data, .end = (const uint8_t *)data + len, .what = what, .allow = allow,
                .user = user, .err = err};
    vm.op_at = vm.p;
    vm.pk = calloc(1, sizeof *vm.pk);
    vm.marks = malloc(PK_MAX_MARKS * sizeof *vm.marks);
    col_status st = COL_OK;
    if (!vm.pk || !vm.marks || !(vm.none = vm_new(&vm, COL_PK_NONE)) || !(vm.yes = vm_new(&vm, COL_PK_BOOL)) ||
        !(vm.no = vm_new(&vm, COL_PK_BOOL))) {
        st = col_err_set(err, COL_ENOMEM, "%s: out of memory while reading the pickle", what);
        goto done;
    }
    vm.yes->i = 1;
    bool stop = false;
    while (!stop) {
        if (vm.p >= vm.end) {
            st = col_err_set(err, COL_EFORMAT, "%s: the pickle ends without STOP (truncated?)", what);
            goto done;
        }
        vm.op_at = vm.p;
        uint8_t op = *vm.p++;
        if ((st = vm_step(&vm, op, &stop)) != COL_OK)
            goto done;
    }
    if (vm.nmarks != 0 || vm.sp != 1) {
        st = vm_fail(&vm, "the pickle does not end with exactly one value on the stack");
        goto done;
    }
    *root = vm.stack[0];
    *out = vm.pk;
    vm.pk = NULL;
done:
    col_pk_free(vm.pk);
    free(vm.stack);
    free(vm.marks);
    free(vm.memo);
    return st;
}
