// Split-K epilogue shared by the weight-only kernels (the host prepends this file to each source). Call it
// after the CTA has added its partial sums into the FP32 workspace with atomicAdd: the last CTA (per-tile
// counter) of row tile blockIdx.x converts rows [row0, row0 + rows) x mt of the workspace to y with `out`,
// and leaves workspace and counter zeroed for the next call, so one launch does it all.

// One output value: into the workspace when K is split over gridDim.y (splitk_finish converts it later),
// else straight to y through `out`.
template <typename Out>
__device__ __forceinline__ void splitk_store(float* __restrict__ ws, unsigned short* __restrict__ y, size_t o,
                                             float v, bool split, Out out) {
    if (split)
        atomicAdd(ws + o, v);
    else
        y[o] = out(v);
}

template <typename Out>
__device__ __forceinline__ void splitk_finish(float* __restrict__ ws, unsigned short* __restrict__ y,
                                              unsigned int* __restrict__ counters, int row0, int rows, int n_rows,
                                              int mt, Out out) {
    __shared__ bool is_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned int prev = atomicAdd(counters + blockIdx.x, 1u);
        is_last = prev == gridDim.y - 1;
    }
    __syncthreads();
    if (is_last) {
        __threadfence();
        for (int i = threadIdx.x; i < rows * mt; i += blockDim.x) {
            const int r = i / mt, m = i - r * mt;
            const size_t o = (size_t)m * n_rows + row0 + r;
            y[o] = out(atomicExch(ws + o, 0.0f));
        }
        if (threadIdx.x == 0) counters[blockIdx.x] = 0;
    }
}

