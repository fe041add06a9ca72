// The processes of a data-parallel job, over MPI (MPI_COMM_WORLD), as torch.distributed's
// process group. An optional component: built when CMake finds MPI (CTRANSFORMER_MPI); without it
// available() is false and world() throws, and the rest of the library works as before.
//
// Start a job with `mpirun -np N program`; MPI is initialised on the first world() (thread level
// MPI_THREAD_SERIALIZED: calls may come from any thread, one at a time) and finalised at exit.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace ct::distributed {

// True when this build has MPI.
bool available();

class ProcessGroup {
public:
    static ProcessGroup& world();

    int rank() const { return rank_; }
    int size() const { return size_; }

    // Blocking collectives, in place.
    void all_reduce_sum(float* data, std::size_t n);
    void all_reduce_sum(double* data, std::size_t n);
    void broadcast(float* data, std::size_t n, int root);
    void broadcast(std::vector<char>& bytes, int root);   // resized to the root's length
    void barrier();
    // Stop every process of the job (MPI_Abort) after printing `message` to stderr with this rank.
    [[noreturn]] void abort(const std::string& message, int code = 1);

    // Non-blocking sum all-reduce in place (MPI_Iallreduce): start() returns a handle, progress()
    // lets MPI move every started reduction on (MPI progresses inside MPI calls only), wait_all()
    // blocks until all are done and forgets them. Every process must start the same reductions in
    // the same order.
    std::size_t start_all_reduce_sum(float* data, std::size_t n);
    void progress();
    void wait_all();

    ProcessGroup(const ProcessGroup&) = delete;
    ProcessGroup& operator=(const ProcessGroup&) = delete;

private:
    ProcessGroup();
    int rank_ = 0;
    int size_ = 1;
    std::vector<void*> requests_;   // MPI_Request handles, kept opaque so this header needs no mpi.h
};

}  // namespace ct::distributed
