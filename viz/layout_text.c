/* Words for the diagrams (see layout_text.h). */
#include "viz/layout_text.h"

#include <stdio.h>

void viz_range_text(int64_t first, int64_t count, char *buf, size_t size)
{
    if (count == 1)
        snprintf(buf, size, "%lld", (long long)first);
    else
        snprintf(buf, size, "%lld-%lld", (long long)first, (long long)(first + count - 1));
}

void viz_tokens_text(const usp_seq_layout *l, int sp_rank, char *buf, size_t size)
{
    usp_token_run runs[2];
    int n = usp_seq_layout_runs(l, sp_rank, runs);
    char a[48], b[48];
    viz_range_text(runs[0].global_first, runs[0].count, a, sizeof a);
    if (n == 1) {
        snprintf(buf, size, "%s", a);
        return;
    }
    viz_range_text(runs[1].global_first, runs[1].count, b, sizeof b);
    snprintf(buf, size, "%s, %s", a, b);
}

void viz_head_split(int64_t heads, int ulysses, int j, int64_t *first, int64_t *count)
{
    int64_t base = heads / ulysses, extra = heads % ulysses;
    *count = base + (j < extra);
    *first = (int64_t)j * base + (j < extra ? j : extra);
}
