// candidates/cuda/mla_decode.cu compiled for the CUDA emulator (cuda_emu.h), for the *_emu tests.
#define DG_CUDA_EMULATE 1
#include "candidates/cuda/mla_decode.cu"
