#include "ctransformer/distributed/process_group.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ctransformer/error.hpp"

#ifdef CTRANSFORMER_MPI
#include <mpi.h>
#endif

namespace ct::distributed {

#ifdef CTRANSFORMER_MPI

namespace {

void check(int code, const char* what) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw RuntimeError(std::string("distributed: ") + what + " failed: " + std::string(text, std::size_t(length)));
}

// MPI counts are ints: longer buffers go in pieces.
constexpr std::size_t kPiece = std::size_t(INT_MAX) / 2;

void finalize_at_exit() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

// MPI_Request is a pointer in Open MPI and an int in MPICH: stored in a void* either way.
static_assert(sizeof(MPI_Request) <= sizeof(void*), "MPI_Request must fit a pointer");
MPI_Request& as_request(void*& slot) { return *reinterpret_cast<MPI_Request*>(&slot); }

}  // namespace

bool available() { return true; }

ProcessGroup::ProcessGroup() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        int provided = 0;
        check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
        if (provided < MPI_THREAD_SERIALIZED)
            throw RuntimeError("distributed: this MPI gives thread level " + std::to_string(provided) +
                               ", below MPI_THREAD_SERIALIZED, which backward on a Python thread needs");
        std::atexit(finalize_at_exit);
    }
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
}

ProcessGroup& ProcessGroup::world() {
    static ProcessGroup group;
    return group;
}

void ProcessGroup::all_reduce_sum(float* data, std::size_t n) {
    for (std::size_t at = 0; at < n; at += kPiece)
        check(MPI_Allreduce(MPI_IN_PLACE, data + at, int(std::min(kPiece, n - at)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
              "MPI_Allreduce");
}

void ProcessGroup::all_reduce_sum(double* data, std::size_t n) {
    for (std::size_t at = 0; at < n; at += kPiece)
        check(MPI_Allreduce(MPI_IN_PLACE, data + at, int(std::min(kPiece, n - at)), MPI_DOUBLE, MPI_SUM,
                            MPI_COMM_WORLD),
              "MPI_Allreduce");
}

void ProcessGroup::broadcast(float* data, std::size_t n, int root) {
    for (std::size_t at = 0; at < n; at += kPiece)
        check(MPI_Bcast(data + at, int(std::min(kPiece, n - at)), MPI_FLOAT, root, MPI_COMM_WORLD), "MPI_Bcast");
}

void ProcessGroup::broadcast(std::vector<char>& bytes, int root) {
    unsigned long long length = bytes.size();
    check(MPI_Bcast(&length, 1, MPI_UNSIGNED_LONG_LONG, root, MPI_COMM_WORLD), "MPI_Bcast");
    bytes.resize(std::size_t(length));
    for (std::size_t at = 0; at < bytes.size(); at += kPiece)
        check(MPI_Bcast(bytes.data() + at, int(std::min(kPiece, bytes.size() - at)), MPI_CHAR, root, MPI_COMM_WORLD),
              "MPI_Bcast");
}

void ProcessGroup::barrier() { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

void ProcessGroup::abort(const std::string& message, int code) {
    std::fprintf(stderr, "ctransformer: rank %d of %d stops the job: %s\n", rank_, size_, message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);   // MPI_Abort does not return; if an MPI ever did, stop anyway
}

std::size_t ProcessGroup::start_all_reduce_sum(float* data, std::size_t n) {
    const std::size_t first = requests_.size();
    for (std::size_t at = 0; at < n; at += kPiece) {
        void* slot = nullptr;
        check(MPI_Iallreduce(MPI_IN_PLACE, data + at, int(std::min(kPiece, n - at)), MPI_FLOAT, MPI_SUM,
                             MPI_COMM_WORLD, &as_request(slot)),
              "MPI_Iallreduce");
        requests_.push_back(slot);
    }
    return first;
}

void ProcessGroup::progress() {
    if (requests_.empty()) return;
    int done = 0;
    check(MPI_Testall(int(requests_.size()), reinterpret_cast<MPI_Request*>(requests_.data()), &done,
                      MPI_STATUSES_IGNORE),
          "MPI_Testall");
}

void ProcessGroup::wait_all() {
    if (requests_.empty()) return;
    check(MPI_Waitall(int(requests_.size()), reinterpret_cast<MPI_Request*>(requests_.data()), MPI_STATUSES_IGNORE),
          "MPI_Waitall");
    requests_.clear();
}

#else  // no MPI in this build

namespace {
[[noreturn]] void no_mpi() {
    throw RuntimeError("distributed: this build of ctransformer has no MPI. Install MPI (Debian: apt-get install "
                       "openmpi-bin libopenmpi-dev) and rebuild (pip install . finds it; CMake option "
                       "CTRANSFORMER_MPI)");
}
}  // namespace

bool available() { return false; }
ProcessGroup::ProcessGroup() { no_mpi(); }
ProcessGroup& ProcessGroup::world() { no_mpi(); }
void ProcessGroup::all_reduce_sum(float*, std::size_t) { no_mpi(); }
void ProcessGroup::all_reduce_sum(double*, std::size_t) { no_mpi(); }
void ProcessGroup::broadcast(float*, std::size_t, int) { no_mpi(); }
void ProcessGroup::broadcast(std::vector<char>&, int) { no_mpi(); }
void ProcessGroup::barrier() { no_mpi(); }
void ProcessGroup::abort(const std::string& message, int code) {
    std::fprintf(stderr, "ctransformer: %s\n", message.c_str());
    std::_Exit(code);
}
std::size_t ProcessGroup::start_all_reduce_sum(float*, std::size_t) { no_mpi(); }
void ProcessGroup::progress() { no_mpi(); }
void ProcessGroup::wait_all() { no_mpi(); }

#endif

}  // namespace ct::distributed
