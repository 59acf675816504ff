// Planted kernels for the PC-sampling rules (docs/analyzer.md, rules 11-16): for each rule a bad kernel
// with the inefficiency and a fixed one doing the same work, launched from the examples
// (examples/inefficiencies/<rule>.py) through planted_<rule>(fixed, steps). Built by the Makefile beside
// this file (nvcc -lineinfo, shared CUDA runtime, so deepctx's probes and agent see the launches).
#include <cuda_runtime.h>
#include <mma.h>
#include <stdio.h>

#define EXPORT extern "C" __attribute__((visibility("default")))

static float *buf_a, *buf_b, *buf_c;
static const int N = 1 << 24;  // 64 MiB per buffer
static const int M = 2048;     // matrices: M x M

static int setup(void) {
    if (buf_a)
        return 0;
    if (cudaMalloc(&buf_a, N * sizeof(float)) || cudaMalloc(&buf_b, N * sizeof(float)) ||
        cudaMalloc(&buf_c, N * sizeof(float)))
        return -1;
    cudaMemset(buf_a, 0, N * sizeof(float));
    cudaMemset(buf_b, 0, N * sizeof(float));
    return 0;
}

EXPORT int planted_sync(void) { return (int)cudaDeviceSynchronize(); }

// --- long-scoreboard: a grid-stride sum whose every load is consumed at once, with 4 warps per SM (one block
// each): its warps wait on the loads' latency (0.18 TB/s on the H200). Fixed: four independent loads in flight
// per thread before any is used, and 16 blocks per SM (64 warps), enough to cover the latency (four loads in
// flight with 4 warps per SM alone reached 0.57 TB/s and still waited on the long scoreboard at 92%).
__global__ void sum_dependent(const float *x, float *out, int n) {
    float acc = 0.f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        acc = acc * 0.5f + x[i];  // the next iteration waits for this load
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

__global__ void sum_prefetched(const float *x, float *out, int n) {
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
    int stride = gridDim.x * blockDim.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        float v0 = x[i], v1 = x[i + stride], v2 = x[i + 2 * stride], v3 = x[i + 3 * stride];
        a0 += v0; a1 += v1; a2 += v2; a3 += v3;
    }
    for (; i < n; i += stride)
        a0 += x[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = a0 + a1 + a2 + a3;
}

EXPORT int planted_long_scoreboard(int fixed, int steps) {
    if (setup())
        return -1;
    for (int s = 0; s < steps; s++) {
        if (fixed)
            sum_prefetched<<<132 * 16, 128>>>(buf_a, buf_c, N);
        else
            sum_dependent<<<132, 128>>>(buf_a, buf_c, N);
    }
    return (int)cudaGetLastError();
}

// --- uncoalesced-access: a naive transpose of an M x M matrix on every multiprocessor: a warp reads 32
// neighbouring floats of a row (coalesced) and writes them down a column, 32 floats M apart, so each warp's
// store is 32 transactions and the stores fill the LG queue. (The first pair here, one thread per row summing
// it, used 16 blocks, likely too few warps to fill the queue, its rows' lines reusable from L1.) Fixed: the
// transpose through a padded shared-memory tile, both sides coalesced (transpose_tiled<1>, below).
template <int PAD>
__global__ void transpose_tiled(const float *in, float *out, int n);

__global__ void transpose_naive(const float *in, float *out, int n) {
    int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    for (int k = 0; k < 32; k += 8)
        out[(size_t)x * n + y + k] = in[(size_t)(y + k) * n + x];  // neighbouring threads: n floats apart
}

EXPORT int planted_uncoalesced_access(int fixed, int steps) {
    if (setup())
        return -1;
    dim3 grid(M / 32, M / 32), block(32, 8);
    for (int s = 0; s < steps; s++) {
        if (fixed)
            transpose_tiled<1><<<grid, block>>>(buf_a, buf_b, M);
        else
            transpose_naive<<<grid, block>>>(buf_a, buf_b, M);
    }
    return (int)cudaGetLastError();
}

// --- bank-conflicts: a 32 x 32 tiled transpose through shared memory; reading a column of a [32][32]
// tile puts the warp's 32 accesses in one bank. Fixed: the [32][33] tile (one float of padding).
template <int PAD>
__global__ void transpose_tiled(const float *in, float *out, int n) {
    __shared__ float tile[32][32 + PAD];
    int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    for (int k = 0; k < 32; k += 8)
        tile[threadIdx.y + k][threadIdx.x] = in[(size_t)(y + k) * n + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x;
    y = blockIdx.x * 32 + threadIdx.y;
    for (int k = 0; k < 32; k += 8)
        out[(size_t)(y + k) * n + x] = tile[threadIdx.x][threadIdx.y + k];  // a column of the tile
}

EXPORT int planted_bank_conflicts(int fixed, int steps) {
    if (setup())
        return -1;
    dim3 grid(M / 32, M / 32), block(32, 8);
    for (int s = 0; s < steps; s++) {
        if (fixed)
            transpose_tiled<1><<<grid, block>>>(buf_a, buf_b, M);
        else
            transpose_tiled<0><<<grid, block>>>(buf_a, buf_b, M);
    }
    return (int)cudaGetLastError();
}

// --- warp-divergence: odd and even threads of each warp take different long paths, so each warp runs
// both one after the other. Fixed: the same work split by warp (odd and even warps), each warp one path.
// Two kernels, so that the analyzer's data flow over their SASS tells the branches apart (rule 14).
__device__ float path_a(float v) {
    for (int k = 0; k < 256; k++)
        v = v * 1.0001f + 0.5f;
    return v;
}

__device__ float path_b(float v) {
    for (int k = 0; k < 256; k++)
        v = v * 0.9999f - 0.25f;
    return v;
}

__global__ void branchy_lanes(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    int odd = threadIdx.x & 1;  // differs between neighbouring lanes
    x[i] = odd ? path_a(x[i]) : path_b(x[i]);  // BRANCH_WARP_DIVERGENCE
}

__global__ void branchy_warps(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    int odd = (threadIdx.x / 32) & 1;  // the same for the 32 lanes of a warp (blockDim.x a multiple of 32)
    x[i] = odd ? path_a(x[i]) : path_b(x[i]);
}

EXPORT int planted_warp_divergence(int fixed, int steps) {
    if (setup())
        return -1;
    for (int s = 0; s < steps; s++) {
        if (fixed)
            branchy_warps<<<(1 << 20) / 256, 256>>>(buf_a, 1 << 20);
        else
            branchy_lanes<<<(1 << 20) / 256, 256>>>(buf_a, 1 << 20);
    }
    return (int)cudaGetLastError();
}

// --- fp32-fma: a tiled SGEMM on the CUDA cores (FFMA). Fixed: the same product on the tensor cores
// (WMMA, TF32 inputs, FP32 accumulation).
__global__ void sgemm_fma(const float *a, const float *b, float *c, int n) {
    __shared__ float ta[16][16], tb[16][16];
    int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
    float acc = 0.f;
    for (int k0 = 0; k0 < n; k0 += 16) {
        ta[threadIdx.y][threadIdx.x] = a[(size_t)row * n + k0 + threadIdx.x];
        tb[threadIdx.y][threadIdx.x] = b[(size_t)(k0 + threadIdx.y) * n + col];
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 16; k++)
            acc += ta[threadIdx.y][k] * tb[k][threadIdx.x];  // FFMA
        __syncthreads();
    }
    c[(size_t)row * n + col] = acc;
}

__global__ void sgemm_tf32(const float *a, const float *b, float *c, int n) {
    using namespace nvcuda;
    int warp_row = blockIdx.y * 16, warp_col = blockIdx.x * 16;  // one warp per 16 x 16 tile of c
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
    wmma::fill_fragment(fc, 0.f);
    for (int k0 = 0; k0 < n; k0 += 8) {
        wmma::load_matrix_sync(fa, a + (size_t)warp_row * n + k0, n);
        wmma::load_matrix_sync(fb, b + (size_t)k0 * n + warp_col, n);
        for (int t = 0; t < fa.num_elements; t++)
            fa.x[t] = wmma::__float_to_tf32(fa.x[t]);
        for (int t = 0; t < fb.num_elements; t++)
            fb.x[t] = wmma::__float_to_tf32(fb.x[t]);
        wmma::mma_sync(fc, fa, fb, fc);
    }
    wmma::store_matrix_sync(c + (size_t)warp_row * n + warp_col, fc, n, wmma::mem_row_major);
}

EXPORT int planted_fp32_fma(int fixed, int steps) {
    if (setup())
        return -1;
    dim3 grid(M / 16, M / 16);
    for (int s = 0; s < steps; s++) {
        if (fixed)
            sgemm_tf32<<<grid, 32>>>(buf_a, buf_b, buf_c, M);
        else
            sgemm_fma<<<grid, dim3(16, 16)>>>(buf_a, buf_b, buf_c, M);
    }
    return (int)cudaGetLastError();
}

// --- low-occupancy: a memory-bound scale whose blocks each reserve 96 KiB of shared memory they barely
// use, so two blocks fit on a multiprocessor. Fixed: the same scale without the reservation.
__global__ void scale_hog(float *x, int n, float f) {
    extern __shared__ float hog[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x == 0)
        hog[0] = f;
    __syncthreads();
    for (; i < n; i += gridDim.x * blockDim.x)
        x[i] *= hog[0];
}

EXPORT int planted_low_occupancy(int fixed, int steps) {
    if (setup())
        return -1;
    int shared = fixed ? (int)sizeof(float) : 96 * 1024;
    cudaFuncSetAttribute(scale_hog, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024);
    for (int s = 0; s < steps; s++)
        scale_hog<<<132 * 8, 256, shared>>>(buf_a, N, 1.0f);
    return (int)cudaGetLastError();
}
