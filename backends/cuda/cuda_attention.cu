/* (being written) */
#include "backends/cuda/cuda_common.cuh"
