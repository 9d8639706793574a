/* MPI_IN_PLACE for aiperf's in-place all-reduce: rsmpi 0.8 does not expose it, and its
   value differs between MPI implementations (OpenMPI: (void *) 1, MPICH: (void *) -1). */
#include <mpi.h>

void *aiperf_mpi_in_place(void) { return MPI_IN_PLACE; }
