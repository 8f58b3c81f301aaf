# CTest runs of MPI programs (the ring-attention test and example), included when MPI is found.
# headwise_add_mpi_test(<name> <ranks> <target> [args...]) runs <target> on <ranks> processes.
# Open MPI refuses more processes than cores, and root, unless told: CI runs as root on 2 cores.
# One OpenMP thread per process, so that oversubscribed ranks do not also fight over threads.
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _headwise_mpiexec_version ERROR_QUIET)
set(HEADWISE_MPIEXEC_FLAGS "")
if(_headwise_mpiexec_version MATCHES "Open MPI|OpenRTE")
  set(HEADWISE_MPIEXEC_FLAGS --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=1)
endif()

function(headwise_add_mpi_test name ranks target)
  add_test(NAME ${name}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${ranks} ${HEADWISE_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS}
            $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS} ${ARGN})
  set(environment "OMP_NUM_THREADS=1")
  if(HEADWISE_SANITIZE)  # Open MPI's own allocations, kept until exit, are not ours to report
    list(APPEND environment "ASAN_OPTIONS=detect_leaks=0")
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT 600 PROCESSORS ${ranks} ENVIRONMENT "${environment}")
endfunction()
