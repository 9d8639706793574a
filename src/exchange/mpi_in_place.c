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

/* An integer control variable of the MPI library, read through the MPI tool interface
   (MPI 3.1): -1 when the library has no such variable or it is not one integer. Used to
   read coll_han_priority, OpenMPI's hierarchical collective component's priority, which
   mpirun --mca, OMPI_MCA_* and the MCA parameter files may all set. */
int aiperf_mpi_cvar_int(const char *name) {
    int provided, index, count, value = -1;
    MPI_T_cvar_handle handle;
    MPI_Datatype type;
    int verbosity, bind, scope, name_len = 0, desc_len = 0;
    MPI_T_enum enumtype;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return -1;
    if (MPI_T_cvar_get_index(name, &index) == MPI_SUCCESS &&
        MPI_T_cvar_get_info(index, NULL, &name_len, &verbosity, &type, &enumtype, NULL,
                            &desc_len, &bind, &scope) == MPI_SUCCESS &&
        type == MPI_INT &&
        MPI_T_cvar_handle_alloc(index, NULL, &handle, &count) == MPI_SUCCESS) {
        int v;
        if (count == 1 && MPI_T_cvar_read(handle, &v) == MPI_SUCCESS) value = v;
        MPI_T_cvar_handle_free(&handle);
    }
    MPI_T_finalize();
    return value;
}
