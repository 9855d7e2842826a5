// The CUDA candidates' source (kda_cuda.cu), kernels and host code, compiled for the CUDA emulator
// (cuda_emu.h): the cuda_kda_emu_test and cuda_emu_test binaries run it on machines without a GPU.
#define DG_CUDA_EMULATE 1
#include "candidates/cuda/kda_cuda.cu"
