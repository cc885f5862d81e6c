/* Freed cpu buffers kept by size (see cpu_block_cache.h). */
#include "backends/cpu/cpu_block_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

typedef struct kept {
    void *block;
    size_t bytes;
} kept;

/* Oldest first: a take searches from the newest, eviction frees from the oldest. A step keeps tens of blocks,
 * so a linear search costs less than the smallest kernel it feeds. */
static kept *blocks;
static size_t n_blocks, capacity, total;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void remove_at(size_t i)
{
    total -= blocks[i].bytes;
    memmove(blocks + i, blocks + i + 1, (n_blocks - i - 1) * sizeof *blocks);
    n_blocks--;
}

void *cpu_block_cache_take(size_t bytes)
{
    void *block = NULL;
    pthread_mutex_lock(&lock);
    for (size_t i = n_blocks; i-- > 0;)
        if (blocks[i].bytes == bytes) {
            block = blocks[i].block;
            remove_at(i);
            break;
        }
    pthread_mutex_unlock(&lock);
    if (block)
        UNPOISON(block, bytes);
    return block;
}

void cpu_block_cache_keep(void *block, size_t bytes, size_t limit)
{
    if (!block)
        return;
    if (bytes < CPU_BLOCK_CACHE_MIN || bytes > limit) {
        free(block);
        return;
    }
    pthread_mutex_lock(&lock);
    if (n_blocks == capacity) {
        size_t grown = capacity ? 2 * capacity : 64;
        kept *more = realloc(blocks, grown * sizeof *more);
        if (!more) { /* no room to remember it: give it back */
            pthread_mutex_unlock(&lock);
            free(block);
            return;
        }
        blocks = more, capacity = grown;
    }
    while (n_blocks > 0 && total + bytes > limit) {
        void *oldest = blocks[0].block;
        UNPOISON(oldest, blocks[0].bytes);
        remove_at(0);
        free(oldest);
    }
    POISON(block, bytes);
    blocks[n_blocks++] = (kept){block, bytes};
    total += bytes;
    pthread_mutex_unlock(&lock);
}

size_t cpu_block_cache_bytes(void)
{
    pthread_mutex_lock(&lock);
    size_t bytes = total;
    pthread_mutex_unlock(&lock);
    return bytes;
}

void cpu_block_cache_release(void)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_blocks; i++) {
        UNPOISON(blocks[i].block, blocks[i].bytes);
        free(blocks[i].block);
    }
    free(blocks);
    blocks = NULL, n_blocks = capacity = total = 0;
    pthread_mutex_unlock(&lock);
}
