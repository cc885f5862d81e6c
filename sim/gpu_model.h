/* The GPU model: a roofline per op.
 *
 * An op that reports `flops` and `bytes` of memory traffic takes
 *     max(flops / (peak(dtype) * efficiency(op)), bytes / (hbm * memory_efficiency))
 * seconds: the slower of its arithmetic and its memory traffic at the rates a
 * real kernel reaches, not at the datasheet's. GEMMs and flash attention have
 * their own efficiency (a large BF16 GEMM reaches a much larger fraction of
 * the tensor-core peak than FlashAttention-2 does on Hopper: about 35% of
 * peak, FlashAttention-3 about 75%, Shah et al. 2024); other ops (norms,
 * copies, softmax merges) run on the CUDA cores at the FP32 peak and are
 * almost always memory bound.
 *
 * Presets (NVIDIA datasheets, dense figures, no sparsity):
 *   h100-sxm  989 TFLOP/s BF16, 67 FP32, 3.35 TB/s HBM3, 80 GB
 *   h200      the H100 SXM's compute, 4.8 TB/s HBM3e, 141 GB
 *   a100-80g  312 TFLOP/s BF16, 19.5 FP32, 2.04 TB/s HBM2e, 80 GB (SXM)
 *   a100-pcie 312 TFLOP/s BF16, 1.94 TB/s, 80 GB (the PCIe Gen4 card)
 *   h100-pcie 756 TFLOP/s BF16, 51 FP32, 2.0 TB/s HBM2e, 80 GB (the PCIe Gen5 card)
 *   l20       119.5 TFLOP/s BF16, 59.8 FP32, 0.864 TB/s GDDR6, 48 GB (Ada, PCIe Gen4, no NVLink)
 *   l40s      362 TFLOP/s BF16, 91.6 FP32, 0.864 TB/s GDDR6, 48 GB (Ada, PCIe Gen4, no NVLink)
 * A GPU can also be read from a JSON file (schema in docs/cluster_model.md). */
#ifndef USP_SIM_GPU_MODEL_H
#define USP_SIM_GPU_MODEL_H

#include <jansson.h>

#include "core/ops/dtype.h"
#include "core/ops/ops.h"
#include "core/base/status.h"
#include "sim/kernel_model.h"

#define SIM_GPU_NAME_MAX 48

/* The attention kernel whose rates the model charges (sim_gpu_use_attention_kernel):
 * a named choice, since it moves a long-sequence step by up to 2x on Hopper. */
typedef enum sim_attention_kernel {
    SIM_ATTENTION_FA2,  /* FlashAttention-2 (Dao 2023): the default, what most published runs used */
    SIM_ATTENTION_FA3,  /* FlashAttention-3 (Shah et al. 2024): Hopper only */
    SIM_ATTENTION_SDPA, /* PyTorch's scaled_dot_product_attention (its flash backend) */
    SIM_ATTENTION_FILE, /* the GPU file's own efficiencies (stated or measured, e.g. by usp calibrate) */
} sim_attention_kernel;

#define SIM_ATTENTION_DEFAULT SIM_ATTENTION_FA2

/* The generation a preset belongs to: the published kernel rates are per generation. */
typedef enum sim_gpu_arch { SIM_ARCH_OTHER, SIM_ARCH_AMPERE, SIM_ARCH_ADA, SIM_ARCH_HOPPER } sim_gpu_arch;

typedef struct sim_gpu {
    char name[SIM_GPU_NAME_MAX];
    /* Dense peaks, FLOP/s. fp32: CUDA cores; tf32, bf16 (= fp16), fp8: tensor cores. */
    double peak_fp64, peak_fp32, peak_tf32, peak_bf16, peak_fp8;
    double hbm_bandwidth;         /* bytes/s, datasheet */
    double memory_bytes;          /* capacity, bytes (decimal GB as marketed) */
    double gemm_efficiency;       /* fraction of the tensor-core peak a large GEMM reaches */
    double attention_efficiency;  /* fraction a flash-attention forward kernel reaches */
    double attention_backward_efficiency; /* the same for its backward kernel */
    double memory_efficiency;     /* fraction of the HBM bandwidth a streaming kernel reaches */
    sim_gpu_arch arch;            /* SIM_ARCH_OTHER for a GPU read from a file */
    sim_attention_kernel attention_kernel; /* what the two attention efficiencies stand for */
    sim_kernel_model kernels;     /* a calibrated file's size-aware kernels (n 0: none): when present they price
                                     every op they have a class for, instead of the roofline */
    double cache_bytes;           /* the cache a rank's ops share, bytes (0: not modelled; sim/cache_model.h): the
                                     L2 of a GPU, a core's L2 on a CPU; used with the kernels' hot classes */
} sim_gpu;

/* "fa2", "fa3", "sdpa", "file". */
const char *sim_attention_kernel_name(sim_attention_kernel k);

/* Parses "fa2", "fa3" or "sdpa" into *out; 0 for anything else. */
int sim_attention_kernel_parse(const char *text, sim_attention_kernel *out);

/* Sets the GPU's attention efficiencies to the published rates of kernel `k` on its
 * generation (table in gpu_model.c, docs/cluster_model.md). USP_ERR_CONFIG, naming
 * --attention-kernel, for FA3 on a GPU that is not Hopper, and for a GPU read from a
 * file (its efficiencies are its own: edit the file). */
usp_status sim_gpu_use_attention_kernel(sim_gpu *gpu, sim_attention_kernel k);

/* The option's text (NULL: leave the GPU's kernel as it is) parsed and applied:
 * USP_ERR_CONFIG naming --attention-kernel, the value and the choices. */
usp_status sim_gpu_use_attention_kernel_named(sim_gpu *gpu, const char *text);

/* The preset called `name` into *out; 0 when there is none. */
int sim_gpu_preset(const char *name, sim_gpu *out);

/* The preset names, comma separated ("h100-sxm, h200, ..."), for messages. */
const char *sim_gpu_preset_names(void);

/* A preset name, or the path of a JSON file describing a GPU. USP_ERR_CONFIG
 * (message naming the file, the field and the value) on a bad one. */
usp_status sim_gpu_from_name_or_file(const char *spec, sim_gpu *out);

/* Reads a GPU from a JSON object. Messages read "<where>: field '<prefix>hbm_tbs' ...",
 * e.g. where "topology file x.json" and prefix "gpu.". */
usp_status sim_gpu_from_json(const json_t *obj, const char *where, const char *prefix, sim_gpu *out);

/* Checks a GPU built in code against the ranges the JSON reader applies
 * (docs/cluster_model.md); messages read "<where>: field '<prefix>hbm_tbs' ...".
 * USP_ERR_CONFIG naming the field, the value and the range. */
usp_status sim_gpu_check(const sim_gpu *gpu, const char *where, const char *prefix);

/* The tensor-core peak FLOP/s for GEMMs in `dtype` (f32 runs as TF32, bf16 as BF16). */
double sim_gpu_peak_flops(const sim_gpu *gpu, usp_dtype dtype);

/* Seconds an op takes on the GPU when it computes in `dtype` (in bf16 when the op says so): its calibrated class
 * (gpu->kernels) when it has one, else the roofline above. */
double sim_gpu_op_seconds(const sim_gpu *gpu, usp_dtype dtype, const usp_op_cost *cost);

/* The same with the fraction `held` of the op's operand bytes in cache (sim/kernel_model.h's hot classes). */
double sim_gpu_op_seconds_held(const sim_gpu *gpu, usp_dtype dtype, const usp_op_cost *cost, double held);

#endif
