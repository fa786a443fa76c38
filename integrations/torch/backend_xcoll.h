// backend_xcoll.h - what the parts of the torch backend "xcoll" share:
// the communicator wrapper, one xcoll call's arguments, the work (WorkXcoll)
// and the backend class (BackendXcoll). Private to integrations/torch/; the
// backend and its parts are described in backend_xcoll.cpp.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "xcoll.h"
}

// The calls of the collectives issue (send/recv, groups, alltoall(v),
// gather, scatter) are used where include/xcoll.h declares them; CMake
// checks the header and sets these (integrations/torch/CMakeLists.txt).
#ifndef XCOLL_TORCH_HAVE_P2P
#define XCOLL_TORCH_HAVE_P2P 0
#endif
#ifndef XCOLL_TORCH_HAVE_ALLTOALL
#define XCOLL_TORCH_HAVE_ALLTOALL 0
#endif
#ifndef XCOLL_TORCH_HAVE_GATHER
#define XCOLL_TORCH_HAVE_GATHER 0
#endif

namespace xcoll_torch {

// An error naming call, with the list of calls this build offers
// (backend_xcoll.cpp).
[[noreturn]] void unsupported(const char *call);

const c10::impl::DeviceGuardImplInterface *cuda_guard();

struct StoreBridge; // backend_xcoll.cpp

// One xcoll communicator of the group and what its calls need: the device
// it is bound to and, for a CUDA device on nccl_like (stream-ordered, as
// ProcessGroupNCCL), the stream its kernels are enqueued on.
struct Comm {
  xcoll_comm_t comm = nullptr;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  bool stream_ordered = false;
  std::optional<c10::Stream> stream;
  std::shared_ptr<StoreBridge> bridge; // the store it was made through

  Comm() = default;
  Comm(const Comm &) = delete;
  Comm &operator=(const Comm &) = delete;
  ~Comm() {
    if (comm != nullptr)
      xcoll_comm_destroy(comm);
  }
};

// ---- one xcoll call, in the terms of core's table of collectives ----

// A call of xcoll's C API as its row in the table (xcoll_coll_info) has it:
// the kind, the buffers, the count argument (count_name), and what the row
// says the call takes: an op, a root or (send, recv) a peer, or
// (alltoallv) counts and displacements per peer, in elements.
struct XcollArgs {
  XcollArgs(xcoll_coll_kind kind_, xcoll_datatype dtype_)
      : kind(kind_), dtype(dtype_) {}

  // alltoallv's arrays (world_size entries each; xcoll copies them).
  void set_vectors(const std::vector<size_t> &send_counts,
                   const std::vector<size_t> &send_displs,
                   const std::vector<size_t> &recv_counts,
                   const std::vector<size_t> &recv_displs) {
    sendcounts = send_counts.data();
    sdispls = send_displs.data();
    recvcounts = recv_counts.data();
    rdispls = recv_displs.data();
  }

  xcoll_coll_kind kind;
  xcoll_datatype dtype;
  const void *sendbuf = nullptr;
  void *recvbuf = nullptr;
  size_t count = 0;
  xcoll_op op = XCOLL_SUM;
  int root = 0; // the root, or the peer of send and recv
  const size_t *sendcounts = nullptr, *sdispls = nullptr;
  const size_t *recvcounts = nullptr, *rdispls = nullptr;
};

// ---- work ----

class WorkXcoll;

// The works a group issued, in issue order, until its completion thread has
// seen them complete. The thread completes a work only when someone needs
// that without waiting for it (a future: DDP's hook; a wait with a timeout;
// a stream-ordered call, whose wait does not hold the host), or when too
// many are left unwaited: a blocking call is completed by its caller's own
// xcoll_wait, one thread hand-off fewer per call. Completion runs in issue
// order, which is xcoll's order, so the works before a wanted one go first.
struct CompletionQueue {
  static constexpr size_t kMaxUnwaited = 64;
  std::mutex lock;
  std::condition_variable cond;
  std::deque<c10::intrusive_ptr<WorkXcoll>> works;
  size_t wanted = 0; // works in the deque that the thread must complete
  bool stopping = false;
};

// One torch Work over one xcoll request (or none: a call recorded in a
// coalescing group, completed with the group's work, its leader).
class WorkXcoll : public c10d::Work {
public:
  // request: from an xcoll_i* call on comm. outputs: what the future holds.
  // keep: tensors that must live until the operation ends. after: run once
  // the operation succeeded (copy staged results to their tensors). done:
  // for a stream-ordered call, the event recorded on the comm's stream after
  // it; stream: the stream the call ran on (CUDA only).
  WorkXcoll(int rank, c10d::OpType type, const char *call, xcoll_comm_t comm,
            xcoll_request_t request, std::vector<at::Tensor> outputs,
            std::vector<at::Tensor> keep, std::function<void()> after,
            std::optional<c10::Stream> stream,
            std::shared_ptr<c10::Event> done);

  ~WorkXcoll() override;

  bool isCompleted() override;

  // On a stream-ordered call: the caller's current stream waits for the
  // collective on the device; the host does not (ProcessGroupNCCL's rule).
  // Otherwise the host waits, as gloo's work does.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;

  void synchronize() override;

  std::vector<at::Tensor> result() override { return outputs_; }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Asks the group's completion thread to complete this work (once).
  void want();

  // xcoll_wait on the request unless someone did already, then finish.
  void complete_blocking();

private:
  // With request_lock_ held: the one place that waits on the request.
  void complete_locked();

  void complete_with(std::exception_ptr error);

  const char *call_;
  xcoll_comm_t comm_;
  std::mutex request_lock_;
  xcoll_request_t request_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;
  std::function<void()> after_;
  std::optional<c10::Stream> stream_;
  std::shared_ptr<c10::Event> done_;
  std::vector<c10::intrusive_ptr<WorkXcoll>> followers_;
  c10::intrusive_ptr<at::ivalue::Future> future_;
  std::atomic<bool> finished_{false};
  // With queue_->lock held: in the queue, and wanted there.
  std::shared_ptr<CompletionQueue> queue_;
  bool queued_ = false;
  bool wanted_ = false;

  friend class BackendXcoll;
};

// ---- the backend ----

// Its parts: backend_xcoll.cpp (making, splitting and ending the group, its
// communicators, the calls it does not offer, the Python module),
// backend_xcoll_coll.cpp (the collectives and their sizes),
// backend_xcoll_p2p.cpp (send, recv, coalescing, alltoall, gather, scatter),
// backend_xcoll_issue.cpp (one call made on xcoll) and backend_xcoll_work.cpp
// (WorkXcoll and the completion thread).
class BackendXcoll : public c10d::Backend {
public:
  // ---- the group (backend_xcoll.cpp) ----
  BackendXcoll(const c10::intrusive_ptr<c10d::Store> &store, int rank,
               int size, std::chrono::milliseconds timeout);
  BackendXcoll(const c10::intrusive_ptr<c10d::Store> &store, int rank,
               int size, std::chrono::milliseconds timeout,
               std::unique_ptr<Comm> host);
  ~BackendXcoll() override;

  const std::string getBackendName() const override { return "xcoll"; }

  // The xcoll backend underneath (tcp, ucx, nccl_like).
  std::string transport() const { return xcoll_comm_backend(host_->comm); }

  c10::intrusive_ptr<Options> getBackendOptions() override;
  void setTimeout(std::chrono::milliseconds timeout) override;

  bool supportsSplitting() const override { return true; }
  bool supportsCoalescing() const override { return XCOLL_TORCH_HAVE_P2P; }

  void eagerConnectSingleDevice(at::Device device) override;
  c10d::ErrorType getError() override;
  c10::intrusive_ptr<Backend>
  split(const c10::intrusive_ptr<c10d::Store> &store,
        const std::vector<int> &ranks,
        const c10::intrusive_ptr<Options> &opts) override;

  int64_t split_count() const { return split_count_; }

  void abort() override;
  void shutdown() override;

  // ---- collectives (backend_xcoll_coll.cpp) ----
  c10::intrusive_ptr<c10d::Work>
  allreduce(std::vector<at::Tensor> &tensors,
            const c10d::AllreduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  allreduce_coalesced(std::vector<at::Tensor> &tensors,
                      const c10d::AllreduceCoalescedOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  broadcast(std::vector<at::Tensor> &tensors,
            const c10d::BroadcastOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  reduce(std::vector<at::Tensor> &tensors,
         const c10d::ReduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  allgather(std::vector<std::vector<at::Tensor>> &outputs,
            std::vector<at::Tensor> &inputs,
            const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  _allgather_base(at::Tensor &output, at::Tensor &input,
                  const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  allgather_into_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                  std::vector<at::Tensor> &inputs,
                                  const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
      const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  reduce_scatter(std::vector<at::Tensor> &outputs,
                 std::vector<std::vector<at::Tensor>> &inputs,
                 const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                       const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  barrier(const c10d::BarrierOptions &opts) override;

  // ---- point to point, coalescing, alltoall, gather, scatter
  // (backend_xcoll_p2p.cpp; each an error naming the call in a build of
  // xcoll without it) ----
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors,
                                      int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors,
                                      int src, int tag) override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  c10::intrusive_ptr<c10d::Work>
  alltoall_base(at::Tensor &output, at::Tensor &input,
                std::vector<int64_t> &output_splits,
                std::vector<int64_t> &input_splits,
                const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  alltoall(std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
           const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  gather(std::vector<std::vector<at::Tensor>> &outputs,
         std::vector<at::Tensor> &inputs,
         const c10d::GatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work>
  scatter(std::vector<at::Tensor> &outputs,
          std::vector<std::vector<at::Tensor>> &inputs,
          const c10d::ScatterOptions &opts) override;

  // ---- what this backend does not offer (backend_xcoll.cpp) ----
  c10::intrusive_ptr<c10d::Work>
  allreduce_sparse(std::vector<at::Tensor> &,
                   const c10d::AllreduceOptions &) override;
  c10::intrusive_ptr<c10d::Work>
  allgather_coalesced(std::vector<std::vector<at::Tensor>> &,
                      std::vector<at::Tensor> &,
                      const c10d::AllgatherOptions &) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &,
                                               int) override;
  void monitoredBarrier(const c10d::BarrierOptions &, bool) override;

private:
  // One call being issued: its communicator and stream, which of xcoll's
  // forms it takes, and where its request goes.
  struct Call {
    const char *name;
    Comm *comm;
    std::optional<c10::Stream> stream; // what xcoll is given (CUDA only)
    bool grouped = false;              // recorded in a coalescing group
    // Runs inline with the blocking form: a synchronous call (async_op
    // False: the caller waits at once) on the host, in the caller's thread,
    // with no hand-off to xcoll's progress thread and back (about 30 us of
    // the 40 a small allreduce took through the request on 2 cores).
    bool blocking = false;
    xcoll_request_t request = nullptr;
    std::unique_lock<std::mutex> lock; // issue order: one call at a time

    void *native_stream() const {
      return stream ? stream->native_handle() : nullptr;
    }
  };

  // A call's buffers once staged, for run(): what xcoll reads and writes
  // (undefined: unused on this rank), and what the work hands back.
  struct Staged {
    at::Tensor send, recv;           // one tensor for the in-place forms
    size_t count = 0;                // the count argument (count_name)
    std::vector<size_t> per_peer[4]; // alltoallv's send counts and
                                     // displacements, then receive ones
    std::vector<at::Tensor> outputs; // the work's result
    std::function<void()> after;     // copies recv to outputs, if needed
  };

  // Elements of the send and receive buffers of a call of kind with count
  // on this rank, from core's table (xcoll_coll_shape).
  struct Shape {
    size_t send = 0, recv = 0;
  };

  // A work over several works (the coalesced forms; backend_xcoll_coll.cpp).
  class WorkList;

  // The group's communicators (backend_xcoll.cpp).
  void start();
  std::unique_ptr<Comm> make_comm(std::shared_ptr<StoreBridge> bridge,
                                  c10::Device device);
  Comm *comm_for(const c10::Device &device, const char *call);
  void check_open(const char *call);

  // One call made on xcoll (backend_xcoll_issue.cpp).
  Call begin(const char *call, const c10::Device &device, bool async_op);
  void launch(Call &c);
  void issue(Call &c, const XcollArgs &a);
  c10::intrusive_ptr<WorkXcoll> end(Call &c, c10d::OpType type,
                                     std::vector<at::Tensor> outputs,
                                     std::vector<at::Tensor> keep,
                                     std::function<void()> after);
  c10::intrusive_ptr<c10d::Work>
  run(const char *call, xcoll_coll_kind kind, c10d::OpType type,
      const at::Tensor &like, const c10d::ReduceOp *reduce_op, int64_t root,
      bool async_op, Staged s);
  static void check(const char *call, xcoll_status status, xcoll_comm_t comm);

  // The forms of a call and their checks (backend_xcoll_coll.cpp).
  template <typename Fn>
  c10::intrusive_ptr<c10d::Work> coalesced(const char *call,
                                           std::vector<at::Tensor> &outputs,
                                           std::vector<at::Tensor> &inputs,
                                           Fn one);
  c10::intrusive_ptr<c10d::Work>
  flat_call(const char *call, xcoll_coll_kind kind, c10d::OpType type,
            const at::Tensor &input, const at::Tensor &output,
            const c10d::ReduceOp *reduce_op, int64_t root, bool async_op);
  c10::intrusive_ptr<c10d::Work>
  list_call(const char *call, xcoll_coll_kind kind, c10d::OpType type,
            const at::Tensor &tensor,
            std::vector<std::vector<at::Tensor>> &lists,
            const c10d::ReduceOp *reduce_op, int64_t root, bool async_op);
  Shape shape_of(const char *call, xcoll_coll_kind kind, size_t count,
                 bool is_root);
  size_t count_of(const char *call, const xcoll_coll_info *info,
                  const at::Tensor &input, const at::Tensor &output);
  void expect_numel(const char *call, const char *what, const at::Tensor &t,
                    size_t expected, bool per_rank, size_t count);
  void check_root_or_peer(const char *call, const xcoll_coll_info *info,
                          int64_t root);
  static void check_alike(const char *call, const at::Tensor &first,
                          const at::Tensor &other);
  static at::Tensor end_to_end(const std::vector<at::Tensor> &tensors);
  static std::function<void()> split_back(const at::Tensor &flat,
                                          std::vector<at::Tensor> targets);
  void check_root(const char *call, int64_t root);
  void check_peer(const char *call, int peer);
  at::Tensor single_tensor(std::vector<at::Tensor> &tensors, const char *call);
  static std::function<void()> copy_back(const at::Tensor &work,
                                         const at::Tensor &tensor);

  // alltoall_base's counts (backend_xcoll_p2p.cpp).
  void split_counts(const char *call, const at::Tensor &t,
                    const std::vector<int64_t> &splits,
                    std::vector<size_t> &counts, std::vector<size_t> &displs);

  // The completion thread (backend_xcoll_work.cpp).
  void enqueue(const c10::intrusive_ptr<WorkXcoll> &work, bool wanted);
  void completer_main();

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Comm> host_;
  std::mutex devices_lock_;
  std::map<c10::DeviceIndex, std::unique_ptr<Comm>> devices_;

  std::mutex state_lock_;
  bool aborted_ = false;
  bool closed_ = false;
  int64_t split_count_ = 0;

  std::mutex issue_lock_;
  std::atomic<bool> coalescing_{false};
  std::thread::id issue_owner_; // the thread of the coalescing group
  std::vector<c10::intrusive_ptr<WorkXcoll>> coalesced_;
  Comm *coalesced_comm_ = nullptr;

  std::shared_ptr<CompletionQueue> queue_ =
      std::make_shared<CompletionQueue>();
  std::thread completer_;
};

} // namespace xcoll_torch
