/* MPI_IN_PLACE for aiperf's in-place all-reduce: rsmpi 0.8 does not expose it, and its
   value differs between MPI implementations (OpenMPI: (void *) 1, MPICH: (void *) -1).
   And whether the MPI library passes CUDA device memory itself (OpenMPI's CUDA extension,
   MPIX_Query_cuda_support, asked at run time: the library found at run time decides). */
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

void *aiperf_mpi_in_place(void) { return MPI_IN_PLACE; }

/* 1: the library takes CUDA device buffers; 0: it does not; -1: it has no way to say. */
int aiperf_mpi_cuda_aware(void) {
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
    return MPIX_Query_cuda_support() ? 1 : 0;
#else
    return -1;
#endif
}

/* Whether the headers this was compiled against describe a CUDA-aware build. */
int aiperf_mpi_cuda_aware_compiled(void) {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return 1;
#else
    return 0;
#endif
}
