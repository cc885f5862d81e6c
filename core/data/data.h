/* Room core/data/: training data, read shard by shard (this file). It may use: parallel/
 * (layouts), ops/ (the mask's documents' table), base/.
 *
 * Training data, read shard by shard.
 *
 * Every SP rank reads only its own tokens of the sequence plus, for each run
 * of consecutive positions it holds, the one token after the run: the target
 * of a shard's last token is the first token of the next shard, never lost.
 * Positions come from the sequence layout (core/parallel/layout.h), so rotary
 * embeddings see GLOBAL position ids. The sample a rank reads depends on the
 * step, its DP index and the seed, never on its SP index: all ranks of an SP
 * group read the same sequence, DP replicas different ones.
 *
 * Sources:
 *   passkey        synthetic long-context retrieval: "pass key=" and a key of
 *                  five random distinct digits open the sequence, a sentence
 *                  repeats, and "what is the pass key=" and the key close it:
 *                  with sequence parallelism the key is in the first shard and
 *                  the question in the last, so only attention across shards
 *                  can answer.
 *   text:FILE      bytes as tokens (vocabulary 256)
 *   tokens:FILE    llm.c .bin shards (header of 256 int32: magic 20240520,
 *                  version 1, token count; then uint16 tokens), or raw uint16
 *   tokens32:FILE  raw uint32 tokens
 *   text:DIR       a directory's files, each a document ended by byte 0 (core/data/text_dir.h): --eot 0
 *                  unless another is given; read into memory
 * Padding (--pad): positions at or past the real length hold token 0 and
 * target -1 (ignored by the loss); the causal mask keeps real tokens from
 * seeing them.
 *
 * Packed documents (a shard with a documents' table, usp_shard_alloc_documents): a file source
 * with an end-of-text id (usp_data_set_eot) is cut into documents, each ending with its end-of-text
 * token (a document runs up to and with it; the window's first one may have begun before it). The
 * table gives every position of the sequence its document's [start, end), so the attention's mask
 * (core/ops/mask.h) keeps each document to itself; positions restart at 0 with each document, and
 * the target of a document's last token, which would be the next document's first, is -1. Without
 * an end-of-text id the real tokens are one document; padding is one of its own. */
#ifndef USP_DATA_H
#define USP_DATA_H

#include <stdint.h>
#include <stdio.h>

#include "core/parallel/layout.h"

typedef enum usp_data_kind { USP_DATA_PASSKEY, USP_DATA_TEXT, USP_DATA_TOKENS16, USP_DATA_TOKENS32 } usp_data_kind;

#define USP_PASSKEY_DIGITS 5

typedef struct usp_data {
    usp_data_kind kind;
    char *path;            /* the file (NULL for passkey); freed by usp_data_close */
    FILE *fp;
    char *mem;             /* text:DIR: the directory's files read into memory, which fp reads (else NULL) */
    int64_t file_tokens;   /* tokens in the file */
    int64_t header_bytes;  /* llm.c header */
    int64_t vocab;         /* the largest token id + 1 the source can produce (checked against the model) */
    uint64_t seed;
    int64_t eot;           /* the end-of-text id that ends a document (usp_data_set_eot); -1: none */
} usp_data;

/* One rank's share of one sequence: tokens, targets (-1: ignored) and positions, [count] each; with
 * packed documents, the documents' table of the whole sequence, [seq_len][2]. */
typedef struct usp_shard {
    int32_t *tokens, *targets, *positions;
    int64_t count;
    int32_t *docs;         /* NULL: no documents (positions are global) */
    int64_t seq_len;       /* positions docs covers */
} usp_shard;

/* For passkey data: 1 when the target at global position `pos` of a sample of real length `len` is a key digit. */
int usp_data_is_answer(const usp_data *d, int64_t pos, int64_t len);

/* The distinct sequences of real length `len` a file source holds (consecutive windows of len + 1 tokens;
 * sample k reads window k mod this); 0 for passkey data, whose samples never repeat. */
int64_t usp_data_windows(const usp_data *d, int64_t len);

/* Opens a data source from its spec (passkey | text:FILE | tokens:FILE | tokens32:FILE). */
usp_status usp_data_open(const char *spec, uint64_t seed, usp_data *out);

/* Closes the source. */
void usp_data_close(usp_data *d);

/* Refuses an end-of-text id, naming it, for data spec `spec` that has no tokens of its own (passkey) or
 * outside the model's vocabulary `vocab`: what usp_data_set_eot checks without opening the source. */
usp_status usp_data_eot_check(const char *spec, int64_t eot, int64_t vocab);

/* Sets the end-of-text id that ends documents (--eot): refused, naming the value, when the source has no
 * tokens of its own (passkey), when the id is outside the model's vocabulary `vocab`, or when the file
 * never holds it (the whole file is read once). */
usp_status usp_data_set_eot(usp_data *d, int64_t eot, int64_t vocab);

/* The longest document of the file cut at end-of-text id `eot` (*longest) and how many are longer than
 * `limit` tokens (*over), reading the whole file once. */
usp_status usp_data_long_documents(const usp_data *d, int64_t eot, int64_t limit, int64_t *longest, int64_t *over);

/* *count = the valid targets of sample `sample` of real length real_len: every real token's, less the
 * end-of-text tokens' (each ends a document) when the source has an end-of-text id (reads the sample). */
usp_status usp_data_sample_targets(const usp_data *d, int64_t sample, int64_t real_len, int64_t *count);

/* Fills `shard` (allocated by the caller for l->per_rank tokens) with SP rank
 * `sp_rank`'s tokens of sample `sample`, whose real length is `real_len` (<= l->n;
 * positions >= real_len are padding). A shapes-only shard (no arrays) is only
 * checked and counted. */
usp_status usp_data_read_shard(const usp_data *d, const usp_seq_layout *l, int sp_rank, int64_t sample,
                               int64_t real_len, usp_shard *shard);

/* Allocates / frees a shard's host arrays for `count` tokens; `shapes_only`
 * (the meta backend) allocates none: shapes-only runs hold no per-token host memory. */
usp_status usp_shard_alloc(usp_shard *s, int64_t count, int shapes_only);
void usp_shard_free(usp_shard *s);

/* Gives an allocated shard (not shapes-only) a documents' table of seq_len positions: its reads then
 * fill the table and restart positions and cut targets at documents' ends (above). */
usp_status usp_shard_alloc_documents(usp_shard *s, int64_t seq_len);

#endif
