/* Data sources and shard reading (see data.h). */
#include "core/data/data.h"
#include "core/data/text_dir.h"
#include "core/ops/mask.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define LLMC_MAGIC 20240520
#define LLMC_HEADER_INTS 256

static const char filler[] = "the grass is green and the sky is blue. ";
static const char key_intro[] = "pass key=";
static const char question[] = " what is the pass key=";
#define FILLER_LEN ((int64_t)sizeof filler - 1)
#define KEY_INTRO_LEN ((int64_t)sizeof key_intro - 1)
#define QUESTION_LEN ((int64_t)sizeof question - 1)
#define KEY_PHRASE_LEN (KEY_INTRO_LEN + USP_PASSKEY_DIGITS + 1) /* "pass key=12345." */

/* splitmix64: a well-mixed 64-bit hash, so each (seed, sample) draws its own key. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* text:DIR: the files read into memory, one document each, which the reads then see as one file. */
static usp_status open_text_dir(usp_data *d, const char *path)
{
    size_t size;
    USP_CHECK(text_dir_read(path, &d->mem, &size));
    d->fp = fmemopen(d->mem, size, "rb");
    if (!d->fp)
        return usp_error(USP_ERR_RUNTIME, "--data text:%s: cannot read it from memory: %s", path, strerror(errno));
    d->file_tokens = (int64_t)size, d->vocab = 256, d->eot = USP_TEXT_DIR_EOT;
    return USP_OK;
}

static usp_status open_file(usp_data *d, const char *path, int64_t token_bytes)
{
    d->path = strdup(path); /* any length the OS opens: the messages below and the reads name it whole */
    if (!d->path)
        return usp_error(USP_ERR_RUNTIME, "out of memory keeping the --data path");
    if (d->kind == USP_DATA_TEXT && text_dir_is(path))
        return open_text_dir(d, path);
    d->fp = fopen(path, "rb");
    if (!d->fp)
        return usp_error(USP_ERR_CONFIG, "--data: cannot open %s: %s", path, strerror(errno));
    fseek(d->fp, 0, SEEK_END);
    int64_t size = ftell(d->fp);
    int32_t header[LLMC_HEADER_INTS];
    fseek(d->fp, 0, SEEK_SET);
    if (d->kind == USP_DATA_TOKENS16 && size >= (int64_t)sizeof header &&
        fread(header, sizeof header, 1, d->fp) == 1 && header[0] == LLMC_MAGIC) {
        if (header[1] != 1)
            return usp_error(USP_ERR_CONFIG, "--data tokens:%s: llm.c shard version %d, expected 1 (uint16 tokens)",
                             path, header[1]);
        d->header_bytes = (int64_t)sizeof header;
        if (header[2] < 0 || d->header_bytes + 2 * (int64_t)header[2] > size)
            return usp_error(USP_ERR_CONFIG, "--data tokens:%s: the header says %d tokens but the file holds %lld",
                             path, header[2], (long long)((size - d->header_bytes) / 2));
        d->file_tokens = header[2];
    } else {
        if (size % token_bytes != 0)
            return usp_error(USP_ERR_CONFIG, "--data %s: %lld bytes is not a whole number of %lld-byte tokens", path,
                             (long long)size, (long long)token_bytes);
        d->file_tokens = size / token_bytes;
    }
    d->vocab = token_bytes == 1 ? 256 : token_bytes == 2 ? 65536 : (int64_t)1 << 31;
    return USP_OK;
}

usp_status usp_data_open(const char *spec, uint64_t seed, usp_data *out)
{
    *out = (usp_data){.seed = seed, .eot = -1};
    if (strcmp(spec, "passkey") == 0) {
        out->kind = USP_DATA_PASSKEY;
        out->vocab = 128;
        return USP_OK;
    }
    static const struct { const char *prefix; usp_data_kind kind; int64_t bytes; } sources[] = {
        {"text:", USP_DATA_TEXT, 1}, {"tokens:", USP_DATA_TOKENS16, 2}, {"tokens32:", USP_DATA_TOKENS32, 4}};
    for (size_t i = 0; i < sizeof sources / sizeof *sources; i++) {
        size_t n = strlen(sources[i].prefix);
        if (strncmp(spec, sources[i].prefix, n) == 0) {
            out->kind = sources[i].kind;
            usp_status s = open_file(out, spec + n, sources[i].bytes);
            if (s != USP_OK)
                usp_data_close(out);
            return s;
        }
    }
    return usp_error(USP_ERR_CONFIG, "--data %s: unknown source; expected passkey, text:FILE, text:DIR, "
                     "tokens:FILE (llm.c .bin or raw uint16) or tokens32:FILE", spec);
}

int64_t usp_data_windows(const usp_data *d, int64_t len)
{
    return d->kind == USP_DATA_PASSKEY || len < 1 ? 0 : d->file_tokens / (len + 1);
}

void usp_data_close(usp_data *d)
{
    if (d->fp)
        fclose(d->fp);
    d->fp = NULL;
    free(d->mem);
    d->mem = NULL;
    free(d->path);
    d->path = NULL;
}

/* One passkey sample: its key, five distinct digits drawn from (seed, sample)
 * alone (the data must not depend on the mesh). */
typedef struct passkey_sample {
    char key[USP_PASSKEY_DIGITS];
} passkey_sample;

static passkey_sample passkey_draw(const usp_data *d, int64_t sample)
{
    passkey_sample p;
    char pool[10] = {'0', '1', '2', '3', '4', '5', '6', '7', '8', '9'};
    uint64_t r = mix(d->seed ^ mix((uint64_t)sample));
    for (int k = 0; k < USP_PASSKEY_DIGITS; k++) { /* a partial Fisher-Yates shuffle */
        r = mix(r + (uint64_t)k);
        int j = k + (int)(r % (uint64_t)(10 - k));
        char tmp = pool[k];
        pool[k] = pool[j], pool[j] = tmp;
        p.key[k] = pool[k];
    }
    return p;
}

/* Token g (0 <= g <= len) of a passkey sample of real length len: the key
 * phrase opens the sequence (so it is in the first shard whatever the mesh),
 * the filler repeats one sentence (learnt in a few dozen steps, so that what
 * is left to learn is the retrieval), and the question closes it. */
static int32_t passkey_token(const passkey_sample *p, int64_t len, int64_t g)
{
    int64_t answer = len - USP_PASSKEY_DIGITS + 1, ask = answer - QUESTION_LEN; /* tokens 0..len */
    int64_t digits_at = KEY_INTRO_LEN;
    if (g >= answer)
        return p->key[g - answer];
    if (g >= ask)
        return question[g - ask];
    if (g < digits_at)
        return key_intro[g];
    if (g >= digits_at && g < digits_at + USP_PASSKEY_DIGITS)
        return p->key[g - digits_at];
    if (g == digits_at + USP_PASSKEY_DIGITS)
        return '.';
    return filler[g % FILLER_LEN];
}

int usp_data_is_answer(const usp_data *d, int64_t pos, int64_t len)
{
    return d->kind == USP_DATA_PASSKEY && pos >= len - USP_PASSKEY_DIGITS && pos < len;
}

/* Reads `count` tokens of the file from token index `first`. */
static usp_status read_tokens(const usp_data *d, int64_t first, int64_t count, int32_t *out)
{
    int64_t size = d->kind == USP_DATA_TEXT ? 1 : d->kind == USP_DATA_TOKENS16 ? 2 : 4;
    unsigned char buf[4096];
    if (fseek(d->fp, (long)(d->header_bytes + first * size), SEEK_SET) != 0)
        return usp_error(USP_ERR_RUNTIME, "cannot seek in %s", d->path);
    for (int64_t done = 0; done < count;) {
        int64_t n = count - done < (int64_t)sizeof buf / size ? count - done : (int64_t)sizeof buf / size;
        if (fread(buf, (size_t)size, (size_t)n, d->fp) != (size_t)n)
            return usp_error(USP_ERR_RUNTIME, "cannot read %lld tokens from %s", (long long)n, d->path);
        for (int64_t i = 0; i < n; i++) {
            uint32_t v = buf[i * size];
            if (size >= 2) v |= (uint32_t)buf[i * size + 1] << 8;
            if (size == 4) v |= (uint32_t)buf[i * size + 2] << 16 | (uint32_t)buf[i * size + 3] << 24;
            if (v > INT32_MAX)
                return usp_error(USP_ERR_CONFIG, "%s: token %u at index %lld is larger than any vocabulary", d->path,
                                 v, (long long)(first + done + i));
            out[done + i] = (int32_t)v;
        }
        done += n;
    }
    return USP_OK;
}

/* Calls fn(arg, i) for each i in [0, n) where file token first + i is `eot`, in order, until fn returns 0. */
static usp_status each_eot(const usp_data *d, int64_t eot, int64_t first, int64_t n, int (*fn)(void *, int64_t),
                           void *arg)
{
    enum { CHUNK = 1 << 16 };
    int32_t *buf = malloc(CHUNK * sizeof *buf);
    if (!buf)
        return usp_error(USP_ERR_RUNTIME, "out of memory reading --data %s for its end-of-text tokens", d->path);
    usp_status s = USP_OK;
    int more = 1;
    for (int64_t at = 0; at < n && more && s == USP_OK; at += CHUNK) {
        const int64_t count = n - at < CHUNK ? n - at : CHUNK;
        s = read_tokens(d, first + at, count, buf);
        for (int64_t i = 0; i < count && s == USP_OK && more; i++)
            more = buf[i] != eot || fn(arg, at + i);
    }
    free(buf);
    return s;
}

static int stop_at_first(void *found, int64_t at) { return (void)at, *(int *)found = 1, 0; }

usp_status usp_data_eot_check(const char *spec, int64_t eot, int64_t vocab)
{
    if (strcmp(spec, "passkey") == 0)
        return usp_error(USP_ERR_CONFIG, "--eot %lld with --data passkey: passkey samples are one document each; "
                         "--eot cuts a file's tokens into documents (--data tokens:FILE, text:FILE)",
                         (long long)eot);
    if (eot < 0 || eot >= vocab)
        return usp_error(USP_ERR_CONFIG, "--eot %lld is outside the model's vocabulary of %lld ids: give the "
                         "tokenizer's end-of-text id (50256 for GPT-2's)", (long long)eot, (long long)vocab);
    return USP_OK;
}

usp_status usp_data_set_eot(usp_data *d, int64_t eot, int64_t vocab)
{
    USP_CHECK(usp_data_eot_check(d->kind == USP_DATA_PASSKEY ? "passkey" : d->path, eot, vocab));
    int found = 0;
    USP_CHECK(each_eot(d, eot, 0, d->file_tokens, stop_at_first, &found));
    if (!found)
        return usp_error(USP_ERR_CONFIG, "--eot %lld: --data %s never holds that id (%lld tokens read), so nothing "
                         "would be cut into documents: give the id its tokenizer ends a document with",
                         (long long)eot, d->path, (long long)d->file_tokens);
    d->eot = eot;
    return USP_OK;
}

typedef struct document_lengths {
    int64_t last_end, limit, longest, over; /* the last document's end; the lengths seen over `limit` */
} document_lengths;

static int note_length(void *arg, int64_t at)
{
    document_lengths *s = arg;
    const int64_t len = at + 1 - s->last_end;
    s->longest = len > s->longest ? len : s->longest, s->over += len > s->limit;
    s->last_end = at + 1;
    return 1;
}

usp_status usp_data_long_documents(const usp_data *d, int64_t eot, int64_t limit, int64_t *longest, int64_t *over)
{
    document_lengths s = {.limit = limit};
    USP_CHECK(each_eot(d, eot, 0, d->file_tokens, note_length, &s));
    note_length(&s, d->file_tokens - 1); /* the tokens after the last end-of-text: a document too */
    *longest = s.longest, *over = s.over;
    return USP_OK;
}

/* The first file token of sample `sample` of real length real_len: consecutive windows of real_len + 1
 * tokens (the last one only a target), wrapping around the file. */
static int64_t sample_start(const usp_data *d, int64_t sample, int64_t real_len)
{
    return d->kind == USP_DATA_PASSKEY ? 0 : (sample % usp_data_windows(d, real_len)) * (real_len + 1);
}

static int count_one(void *count, int64_t at) { return (void)at, ++*(int64_t *)count, 1; }

usp_status usp_data_sample_targets(const usp_data *d, int64_t sample, int64_t real_len, int64_t *count)
{
    int64_t ends = 0;
    if (d->eot >= 0)
        USP_CHECK(each_eot(d, d->eot, sample_start(d, sample, real_len), real_len, count_one, &ends));
    *count = real_len - ends;
    return USP_OK;
}

typedef struct documents_fill {
    int32_t *doc;
    int64_t first; /* the open document's start */
} documents_fill;

static int end_document(void *arg, int64_t at) /* the document ends with the end-of-text token at `at` */
{
    documents_fill *f = arg;
    usp_mask_table_mark(f->doc, f->first, at + 1);
    f->first = at + 1;
    return 1;
}

/* The documents' table of a sample of real_len tokens from file token `start`, over n >= real_len
 * positions (data.h): a document ends with an end-of-text token, the real tokens' last one ends
 * at real_len, and the padding is one document. */
static usp_status fill_documents(const usp_data *d, int64_t start, int64_t real_len, int64_t n, int32_t *doc)
{
    documents_fill f = {doc, 0};
    if (d->eot >= 0)
        USP_CHECK(each_eot(d, d->eot, start, real_len, end_document, &f));
    usp_mask_table_mark(doc, f.first, real_len);
    usp_mask_table_mark(doc, real_len, n);
    return USP_OK;
}

usp_status usp_data_read_shard(const usp_data *d, const usp_seq_layout *l, int sp_rank, int64_t sample,
                               int64_t real_len, usp_shard *shard)
{
    if (d->kind == USP_DATA_PASSKEY && real_len < 2 * KEY_PHRASE_LEN + QUESTION_LEN + 8)
        return usp_error(USP_ERR_CONFIG, "--seq %lld is too short for passkey data: at least %lld tokens",
                         (long long)real_len, (long long)(2 * KEY_PHRASE_LEN + QUESTION_LEN + 8));
    if (d->kind != USP_DATA_PASSKEY && d->file_tokens < real_len + 1)
        return usp_error(USP_ERR_CONFIG, "--data %s holds %lld tokens; --seq %lld needs at least %lld", d->path,
                         (long long)d->file_tokens, (long long)real_len, (long long)real_len + 1);
    const int64_t start = sample_start(d, sample, real_len);
    shard->count = l->per_rank;
    if (!shard->tokens) /* shapes only (meta): no per-token host memory, nothing to read */
        return USP_OK;
    if (shard->docs) /* every rank the whole sequence's: the attention's mask reads any position */
        USP_CHECK(fill_documents(d, start, real_len, l->n, shard->docs));
    passkey_sample pk = d->kind == USP_DATA_PASSKEY ? passkey_draw(d, sample) : (passkey_sample){0};
    usp_token_run runs[2];
    int n_runs = usp_seq_layout_runs(l, sp_rank, runs);
    int32_t *window = malloc((size_t)(l->per_rank + 1) * sizeof *window);
    if (!window)
        return usp_error(USP_ERR_RUNTIME, "out of memory reading a shard");
    usp_status s = USP_OK;
    for (int r = 0; r < n_runs && s == USP_OK; r++) {
        int64_t g0 = runs[r].global_first, count = runs[r].count;
        int64_t real = g0 >= real_len ? 0 : (g0 + count + 1 <= real_len + 1 ? count + 1 : real_len + 1 - g0);
        if (d->kind == USP_DATA_PASSKEY)
            for (int64_t i = 0; i < real; i++)
                window[i] = passkey_token(&pk, real_len, g0 + i);
        else if (real > 0)
            s = read_tokens(d, start + g0, real, window);
        for (int64_t i = 0; i < count; i++) {
            int64_t at = runs[r].local_first + i, g = g0 + i;
            shard->positions[at] = (int32_t)(shard->docs ? g - shard->docs[2 * g] : g);
            shard->tokens[at] = g < real_len ? window[i] : 0;
            /* past a document's end-of-text token comes another document: nothing to predict */
            const int ends = d->eot >= 0 && shard->tokens[at] == d->eot;
            shard->targets[at] = g < real_len && !ends ? window[i + 1] : -1;
        }
    }
    free(window);
    return s;
}

usp_status usp_shard_alloc(usp_shard *s, int64_t count, int shapes_only)
{
    *s = (usp_shard){.count = count};
    if (shapes_only) /* meta: the count alone, no token arrays (a shard of 2^28 tokens is 3 GB of host memory) */
        return USP_OK;
    s->tokens = malloc((size_t)count * sizeof(int32_t));
    s->targets = malloc((size_t)count * sizeof(int32_t));
    s->positions = malloc((size_t)count * sizeof(int32_t));
    if (!s->tokens || !s->targets || !s->positions) {
        usp_shard_free(s);
        return usp_error(USP_ERR_RUNTIME, "out of memory for a shard of %lld tokens", (long long)count);
    }
    return USP_OK;
}

void usp_shard_free(usp_shard *s)
{
    free(s->tokens), free(s->targets), free(s->positions), free(s->docs);
    *s = (usp_shard){0};
}

usp_status usp_shard_alloc_documents(usp_shard *s, int64_t seq_len)
{
    if (!s->tokens) /* shapes only: no per-token host memory */
        return USP_OK;
    s->docs = malloc((size_t)seq_len * 2 * sizeof *s->docs);
    if (!s->docs)
        return usp_error(USP_ERR_RUNTIME, "out of memory for the documents' table of %lld positions",
                         (long long)seq_len);
    s->seq_len = seq_len;
    return USP_OK;
}
