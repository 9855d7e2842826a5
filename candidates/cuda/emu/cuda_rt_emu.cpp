// The CUDA candidates' shared host code (cuda_rt.cu) compiled for the CUDA emulator (cuda_emu.h).
#define DG_CUDA_EMULATE 1
#include "candidates/cuda/cuda_rt.cu"
