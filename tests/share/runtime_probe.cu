// A CUDA runtime program (built with nvcc where the toolkit exists) for the
// share library's test against the mock libcuda.so.1: the runtime resolves
// the driver's entry points itself (dlopen, dlsym of cuGetProcAddress, then
// cuGetProcAddress for each), so the library is reached through the
// runtime's own resolution. Prints one line per runtime call.
#include <cstdio>
#include <cuda_runtime.h>

int main()
{
        int n = -1;
        cudaError_t e = cudaGetDeviceCount(&n);
        std::printf("cudaGetDeviceCount %s %d\n", cudaGetErrorName(e), n);
        void *p = nullptr;
        e = cudaMalloc(&p, 1 << 20);
        std::printf("cudaMalloc %s\n", cudaGetErrorName(e));
        size_t fr = 0, total = 0;
        e = cudaMemGetInfo(&fr, &total);
        std::printf("cudaMemGetInfo %s %zu %zu\n", cudaGetErrorName(e), fr, total);
        return 0;
}
