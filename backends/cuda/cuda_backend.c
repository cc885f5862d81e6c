/* (being written) */
#include "backends/cuda/cuda_kernels.h"
