/* mt_stage.h - a few host buffers through which chunks of the NVMe tier are
 * read and written back: how the optimizer reaches states that live on NVMe.
 * A host chunk is used in place; an NVMe chunk is read into the least
 * recently used buffer (a dirty one is written back first). */
#ifndef MT_STAGE_H
#define MT_STAGE_H

#include "memtier.h"

typedef struct mt_stage mt_stage;

/* nbuf >= 1 buffers, allocated as chunks need them. */
col_status mt_stage_create(mt_pool *pool, int nbuf, mt_stage **out, col_err *err);
/* Frees the buffers without writing anything back (call mt_stage_flush first). */
void mt_stage_free(mt_stage *s);
/* The host address of ref's bytes. will_write marks the chunk dirty. A
 * pointer stays valid until nbuf - 1 other NVMe chunks have been got. */
col_status mt_stage_get(mt_stage *s, mt_ref ref, bool will_write, void **ptr, col_err *err);
/* Starts reading ref's chunk into a buffer ahead of its use, leaving the
 * keep most recently used buffers alone; when the buffer it would take is
 * dirty, starts writing that one back instead (the read goes ahead on a
 * later call). Reads of chunk i+1 and the write of chunk i-1 then run while
 * the caller works on chunk i. Nothing to do is not an error. */
col_status mt_stage_prefetch(mt_stage *s, mt_ref ref, int keep, col_err *err);
/* Writes every dirty buffer back to its chunk (and waits for transfers). */
col_status mt_stage_flush(mt_stage *s, col_err *err);
/* A limit on the bytes the buffers hold together (0, the default: none).
 * Within it, buffers keep their memory as a cache; past it a get frees the
 * memory of the least recently used buffers (writing a dirty one back
 * first), only as many as it must, and read-ahead happens only when it fits.
 * With a limit, a pointer from get stays valid while the chunks got after it
 * and its own fit in the limit together (and fewer than nbuf were got): a
 * caller that holds k pointers at once sets a limit of at least the k
 * largest chunks' mt_chunk_io_bytes. A chunk larger than the limit still
 * gets its buffer. Setting a limit frees idle clean buffers past it now. */
void mt_stage_set_limit(mt_stage *s, size_t bytes);
size_t mt_stage_limit(const mt_stage *s);
size_t mt_stage_held(const mt_stage *s); /* bytes the buffers hold now */
size_t mt_stage_peak(const mt_stage *s); /* the most they have held at once */
/* Forgets what the buffers hold (keeping their memory), so the next get
 * reads the chunk again: call it after a flush when someone else (the
 * compute tier) may write the chunks. Anything dirty is lost. */
void mt_stage_forget(mt_stage *s);

#endif
