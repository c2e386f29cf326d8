/* Constants that mpi.h defines as macros, which bindings cannot see: each MPI
 * implementation spells them differently (OpenMPI's MPI_IN_PLACE is (void *) 1). */
#include <mpi.h>

void *ferrograd_mpi_in_place(void) { return MPI_IN_PLACE; }
