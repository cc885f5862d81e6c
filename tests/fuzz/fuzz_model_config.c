/* libFuzzer target: the Hugging Face config.json reader on arbitrary bytes.
 *
 * Besides "never crashes, never leaks", it checks what the rest of usp relies
 * on: an accepted config passes usp_model_config_check, has a parameter
 * count, finite positive rotary frequencies, and survives a round trip
 * through usp_model_config_write_hf_json unchanged. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/model/model_config.h"
#include "tests/fuzz/fuzz_scratch.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_scratch_make("cfg", "config.json");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("usp_fuzz_config", 0);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
        abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    usp_model_config c, back;
    if (usp_model_config_from_hf_json(path, &c) == USP_OK) {
        if (usp_model_config_check(&c) != USP_OK || usp_model_config_param_count(&c) < 1)
            abort();
        if (c.positions == USP_POS_ROPE) {
            int64_t pairs = usp_model_config_head_dim(&c) / 2;
            for (int64_t i = 0; i < pairs && i < 64; i++) {
                double f = usp_model_config_rope_inv_freq(&c, i);
                if (!(f > 0.0) || !isfinite(f))
                    abort();
            }
        }
        if (usp_model_config_write_hf_json(&c, out_path) != USP_OK ||
            usp_model_config_from_hf_json(out_path, &back) != USP_OK || !usp_model_config_equal(&c, &back))
            abort();
    }
    close(fd);
    return 0;
}
