// backend_xcoll.cpp - the torch.distributed backend "xcoll": a c10d::Backend
// (PyTorch 2.x) over xcoll's C API, for CPU and CUDA tensors. Built as the
// extension xcoll_torch._C; xcoll_torch/__init__.py registers it for the
// devices cpu and cuda. How it works, and what it offers: docs/torch.md.
//
// One backend object serves every device of its group: the host
// communicator is made when the group is, through the c10d Store that torch
// hands the creator (xcoll_comm_init_kv); a communicator bound to cuda:N is
// made the first time a tensor on cuda:N is used (or at once with
// init_process_group(device_id=...)). Each call's sizes come from core's
// table of collectives (xcoll_coll_shape), and one function makes every
// xcoll call (call_xcoll). A synchronous call on host tensors runs xcoll's
// blocking form inline; any other is issued with the non-blocking form and
// returns a WorkXcoll holding the request, which is waited on exactly once:
// by Work::wait, Work::isCompleted or the group's completion thread, so
// that futures complete without anybody waiting.
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

namespace {

std::string supported_calls() {
  std::string calls =
      "allreduce, allreduce_coalesced, broadcast, reduce, allgather, "
      "_allgather_base, allgather_into_tensor_coalesced, reduce_scatter, "
      "_reduce_scatter_base, reduce_scatter_tensor_coalesced, barrier";
  if (XCOLL_TORCH_HAVE_P2P)
    calls += ", send, recv, coalescing (batch_isend_irecv)";
  if (XCOLL_TORCH_HAVE_ALLTOALL)
    calls += ", alltoall, alltoall_base";
  if (XCOLL_TORCH_HAVE_GATHER)
    calls += ", gather, scatter";
  return calls;
}

[[noreturn]] void unsupported(const char *call) {
  TORCH_CHECK(false, "xcoll backend: ", call,
              " is not supported (supported: ", supported_calls(), ")");
}

const char *reduce_op_name(c10d::ReduceOp::RedOpType op) {
  switch (op) {
  case c10d::ReduceOp::SUM:
    return "SUM";
  case c10d::ReduceOp::AVG:
    return "AVG";
  case c10d::ReduceOp::PRODUCT:
    return "PRODUCT";
  case c10d::ReduceOp::MIN:
    return "MIN";
  case c10d::ReduceOp::MAX:
    return "MAX";
  case c10d::ReduceOp::BAND:
    return "BAND";
  case c10d::ReduceOp::BOR:
    return "BOR";
  case c10d::ReduceOp::BXOR:
    return "BXOR";
  case c10d::ReduceOp::PREMUL_SUM:
    return "PREMUL_SUM";
  case c10d::ReduceOp::UNUSED:
    return "UNUSED";
  }
  return "an unknown reduce op";
}

xcoll_datatype to_xcoll_dtype(const at::Tensor &t, const char *call) {
  switch (t.scalar_type()) {
  case at::kFloat:
    return XCOLL_FLOAT32;
  case at::kDouble:
    return XCOLL_FLOAT64;
  case at::kHalf:
    return XCOLL_FLOAT16;
  case at::kBFloat16:
    return XCOLL_BFLOAT16;
  case at::kChar:
    return XCOLL_INT8;
  case at::kByte:
  case at::kBool: // one byte each, moved as bytes (not reduced: see below)
    return XCOLL_UINT8;
  case at::kInt:
    return XCOLL_INT32;
  case at::kUInt32:
    return XCOLL_UINT32;
  case at::kLong:
    return XCOLL_INT64;
  case at::kUInt64:
    return XCOLL_UINT64;
  default:
    TORCH_CHECK(false, "xcoll backend: ", call, ": tensors of type ",
                t.scalar_type(),
                " are not supported (float32, float64, float16, bfloat16, "
                "int8, uint8, int32, uint32, int64, uint64, bool are)");
  }
}

// The xcoll_op of a c10d::ReduceOp applied to tensor (of xcoll type dtype)
// on comm, for one call. PREMUL_SUM (torch.distributed's
// _make_nccl_premul_sum) becomes a premul sum of comm
// (xcoll_op_create_premul_sum) with the factor converted to the tensor's
// type, destroyed with this object: xcoll multiplies when the call is made,
// so the op may go as soon as the call has returned (NCCL's rule, which
// ProcessGroupNCCL's ncclRedOpRAII relies on too).
class ReduceOpScope {
public:
  ReduceOpScope(const c10d::ReduceOp &op, const at::Tensor &tensor,
                xcoll_datatype dtype, xcoll_comm_t comm, const char *call)
      : comm_(comm) {
    static const struct {
      c10d::ReduceOp::RedOpType torch_op;
      xcoll_op op;
    } built_in[] = {{c10d::ReduceOp::SUM, XCOLL_SUM},
                    {c10d::ReduceOp::AVG, XCOLL_AVG},
                    {c10d::ReduceOp::PRODUCT, XCOLL_PROD},
                    {c10d::ReduceOp::MIN, XCOLL_MIN},
                    {c10d::ReduceOp::MAX, XCOLL_MAX},
                    {c10d::ReduceOp::BAND, XCOLL_BAND},
                    {c10d::ReduceOp::BOR, XCOLL_BOR},
                    {c10d::ReduceOp::BXOR, XCOLL_BXOR}};
    // bool: torch reduces it as logical or/and (gloo and NCCL do the same
    // with SUM/MAX and PRODUCT/MIN); on bytes of 0 and 1 that is BOR/BAND.
    if (tensor.scalar_type() == at::kBool) {
      switch (op.op_) {
      case c10d::ReduceOp::SUM:
      case c10d::ReduceOp::MAX:
      case c10d::ReduceOp::BOR:
        op_ = XCOLL_BOR;
        return;
      case c10d::ReduceOp::PRODUCT:
      case c10d::ReduceOp::MIN:
      case c10d::ReduceOp::BAND:
        op_ = XCOLL_BAND;
        return;
      default:
        TORCH_CHECK(false, "xcoll backend: ", call, ": reduce op ",
                    reduce_op_name(op.op_),
                    " is not supported on bool tensors (SUM, MAX, BOR, "
                    "PRODUCT, MIN, BAND are)");
      }
    }
    for (const auto &entry : built_in) {
      if (op.op_ == entry.torch_op) {
        op_ = entry.op;
        return;
      }
    }
    TORCH_CHECK(op.op_ == c10d::ReduceOp::PREMUL_SUM, "xcoll backend: ", call,
                ": reduce op ", reduce_op_name(op.op_),
                " is not supported (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, "
                "BXOR, PREMUL_SUM are)");
    create_premul_sum(op, tensor, dtype, call);
  }
  ~ReduceOpScope() {
    if (owned_)
      xcoll_op_destroy(op_, comm_);
  }
  ReduceOpScope(const ReduceOpScope &) = delete;
  ReduceOpScope &operator=(const ReduceOpScope &) = delete;

  xcoll_op get() const { return op_; }

private:
  void create_premul_sum(const c10d::ReduceOp &op, const at::Tensor &tensor,
                         xcoll_datatype dtype, const char *call) {
    const auto *supplement =
        dynamic_cast<const c10d::NCCLPreMulSumSupplement *>(
            op.supplement_.get());
    TORCH_CHECK(supplement != nullptr, "xcoll backend: ", call,
                ": PREMUL_SUM without its factor (make the op with "
                "torch.distributed._make_nccl_premul_sum)");
    // The factor, as one element of the tensor's type in host memory.
    at::Tensor scalar =
        supplement->tensor_factor.defined()
            ? supplement->tensor_factor.reshape({-1})
                  .narrow(0, 0, 1)
                  .to(at::kCPU, tensor.scalar_type())
                  .contiguous()
            : at::full({}, supplement->double_factor,
                       at::TensorOptions().dtype(tensor.scalar_type()));
    xcoll_status status = xcoll_op_create_premul_sum(
        &op_, scalar.data_ptr(), dtype, XCOLL_SCALAR_HOST, comm_);
    TORCH_CHECK(status == XCOLL_SUCCESS, "xcoll backend: ", call,
                ": PREMUL_SUM: ", xcoll_strerror(status), ": ",
                xcoll_comm_last_error(comm_));
    owned_ = true;
  }

  xcoll_comm_t comm_;
  xcoll_op op_ = XCOLL_SUM;
  bool owned_ = false;
};

// ---- the caller's store, as xcoll_kv_store sees it ----

// Forwards xcoll's rendezvous keys to a c10d Store, under prefix (one per
// communicator made through the store, so that the host communicator and
// each device's do not meet each other's keys). Exceptions stop here: xcoll
// is C. The text of the last one is kept for the caller's message.
struct StoreBridge {
  c10::intrusive_ptr<c10d::Store> store;
  std::string prefix;
  std::string last_error;

  xcoll_kv_store kv() {
    return xcoll_kv_store{this, &StoreBridge::set, &StoreBridge::get,
                          &StoreBridge::add};
  }

  static xcoll_status fail(StoreBridge *self, const std::exception &e) {
    self->last_error = e.what();
    return self->last_error.find("imeout") != std::string::npos
               ? XCOLL_ERR_TIMEOUT
               : XCOLL_ERR_REMOTE;
  }

  static xcoll_status set(void *context, const char *key, const void *value,
                          size_t bytes) {
    auto *self = static_cast<StoreBridge *>(context);
    try {
      const auto *p = static_cast<const uint8_t *>(value);
      self->store->set(self->prefix + key, std::vector<uint8_t>(p, p + bytes));
      return XCOLL_SUCCESS;
    } catch (const std::exception &e) {
      return fail(self, e);
    }
  }

  static xcoll_status get(void *context, const char *key, double timeout_s,
                          void **value, size_t *bytes) {
    auto *self = static_cast<StoreBridge *>(context);
    try {
      std::string full = self->prefix + key;
      self->store->wait({full}, std::chrono::milliseconds(
                                    static_cast<int64_t>(timeout_s * 1000)));
      std::vector<uint8_t> data = self->store->get(full);
      void *copy = std::malloc(data.empty() ? 1 : data.size());
      if (copy == nullptr)
        return XCOLL_ERR_NO_MEMORY;
      if (!data.empty())
        std::memcpy(copy, data.data(), data.size());
      *value = copy;
      *bytes = data.size();
      return XCOLL_SUCCESS;
    } catch (const std::exception &e) {
      return fail(self, e);
    }
  }

  static xcoll_status add(void *context, const char *key, int64_t delta,
                          int64_t *result) {
    auto *self = static_cast<StoreBridge *>(context);
    try {
      *result = self->store->add(self->prefix + key, delta);
      return XCOLL_SUCCESS;
    } catch (const std::exception &e) {
      return fail(self, e);
    }
  }
};

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

const c10::impl::DeviceGuardImplInterface *cuda_guard() {
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
}

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

// Makes the call a describes on comm: its blocking form where blocking (run
// in the caller's thread, or recorded in an xcoll group), else its
// non-blocking form on stream, the request in *request. The one place that
// names xcoll's collective functions.
xcoll_status call_xcoll(const XcollArgs &a, xcoll_comm_t comm, bool blocking,
                        xcoll_stream_t stream, xcoll_request_t *request) {
  switch (a.kind) {
  case XCOLL_COLL_ALLREDUCE:
    return blocking ? xcoll_allreduce(a.sendbuf, a.recvbuf, a.count, a.dtype,
                                      a.op, comm)
                    : xcoll_iallreduce(a.sendbuf, a.recvbuf, a.count,
                                       a.dtype, a.op, comm, stream, request);
  case XCOLL_COLL_ALLGATHER:
    return blocking ? xcoll_allgather(a.sendbuf, a.recvbuf, a.count, a.dtype,
                                      comm)
                    : xcoll_iallgather(a.sendbuf, a.recvbuf, a.count,
                                       a.dtype, comm, stream, request);
  case XCOLL_COLL_REDUCE_SCATTER:
    return blocking ? xcoll_reduce_scatter(a.sendbuf, a.recvbuf, a.count,
                                           a.dtype, a.op, comm)
                    : xcoll_ireduce_scatter(a.sendbuf, a.recvbuf, a.count,
                                            a.dtype, a.op, comm, stream,
                                            request);
  case XCOLL_COLL_BROADCAST:
    return blocking ? xcoll_broadcast(a.sendbuf, a.recvbuf, a.count, a.dtype,
                                      a.root, comm)
                    : xcoll_ibroadcast(a.sendbuf, a.recvbuf, a.count,
                                       a.dtype, a.root, comm, stream,
                                       request);
  case XCOLL_COLL_REDUCE:
    return blocking ? xcoll_reduce(a.sendbuf, a.recvbuf, a.count, a.dtype,
                                   a.op, a.root, comm)
                    : xcoll_ireduce(a.sendbuf, a.recvbuf, a.count, a.dtype,
                                    a.op, a.root, comm, stream, request);
  case XCOLL_COLL_BARRIER:
    return blocking ? xcoll_barrier(comm) : xcoll_ibarrier(comm, request);
#if XCOLL_TORCH_HAVE_P2P
  case XCOLL_COLL_SEND:
    return blocking ? xcoll_send(a.sendbuf, a.count, a.dtype, a.root, comm)
                    : xcoll_isend(a.sendbuf, a.count, a.dtype, a.root, comm,
                                  stream, request);
  case XCOLL_COLL_RECV:
    return blocking ? xcoll_recv(a.recvbuf, a.count, a.dtype, a.root, comm)
                    : xcoll_irecv(a.recvbuf, a.count, a.dtype, a.root, comm,
                                  stream, request);
#endif
#if XCOLL_TORCH_HAVE_ALLTOALL
  case XCOLL_COLL_ALLTOALL:
    return blocking ? xcoll_alltoall(a.sendbuf, a.recvbuf, a.count, a.dtype,
                                     comm)
                    : xcoll_ialltoall(a.sendbuf, a.recvbuf, a.count, a.dtype,
                                      comm, stream, request);
  case XCOLL_COLL_ALLTOALLV:
    return blocking
               ? xcoll_alltoallv(a.sendbuf, a.sendcounts, a.sdispls,
                                 a.recvbuf, a.recvcounts, a.rdispls, a.dtype,
                                 comm)
               : xcoll_ialltoallv(a.sendbuf, a.sendcounts, a.sdispls,
                                  a.recvbuf, a.recvcounts, a.rdispls, a.dtype,
                                  comm, stream, request);
#endif
#if XCOLL_TORCH_HAVE_GATHER
  case XCOLL_COLL_GATHER:
    return blocking ? xcoll_gather(a.sendbuf, a.recvbuf, a.count, a.dtype,
                                   a.root, comm)
                    : xcoll_igather(a.sendbuf, a.recvbuf, a.count, a.dtype,
                                    a.root, comm, stream, request);
  case XCOLL_COLL_SCATTER:
    return blocking ? xcoll_scatter(a.sendbuf, a.recvbuf, a.count, a.dtype,
                                    a.root, comm)
                    : xcoll_iscatter(a.sendbuf, a.recvbuf, a.count, a.dtype,
                                     a.root, comm, stream, request);
#endif
  default:
    break;
  }
  return XCOLL_ERR_NOT_SUPPORTED; // a call this build does not offer
}

} // namespace

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
            std::optional<c10::Stream> stream, std::shared_ptr<c10::Event> done)
      : Work(rank, type), call_(call), comm_(comm), request_(request),
        outputs_(std::move(outputs)), keep_(std::move(keep)),
        after_(std::move(after)), stream_(stream), done_(std::move(done)) {
    std::vector<c10::Device> devices;
    if (stream_)
      devices.push_back(stream_->device());
    future_ = c10::make_intrusive<at::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()), devices);
  }

  ~WorkXcoll() override { complete_blocking(); }

  bool isCompleted() override {
    {
      std::unique_lock<std::mutex> lock(request_lock_, std::try_to_lock);
      if (lock.owns_lock() && request_ != nullptr) {
        int done = 0;
        xcoll_status status = xcoll_test(request_, &done);
        if (done || status != XCOLL_SUCCESS)
          complete_locked();
      }
    }
    std::lock_guard<std::mutex> guard(mutex_);
    return completed_;
  }

  // On a stream-ordered call: the caller's current stream waits for the
  // collective on the device; the host does not (ProcessGroupNCCL's rule).
  // Otherwise the host waits, as gloo's work does.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override {
    if (done_ && timeout == kNoTimeout) {
      std::exception_ptr error;
      {
        std::lock_guard<std::mutex> guard(mutex_);
        error = exception_;
      }
      if (error)
        std::rethrow_exception(error);
      synchronize();
      return true;
    }
    if (timeout == kNoTimeout)
      complete_blocking();
    else
      want(); // Work::wait(timeout) waits for the completion thread
    return Work::wait(timeout);
  }

  void synchronize() override {
    if (done_) {
      c10::Device device = stream_->device();
      done_->block(cuda_guard()->getStream(device));
    }
  }

  std::vector<at::Tensor> result() override { return outputs_; }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    want(); // the future must complete without a wait
    return future_;
  }

  // Asks the group's completion thread to complete this work (once).
  void want();

  // xcoll_wait on the request unless someone did already, then finish.
  void complete_blocking() {
    std::lock_guard<std::mutex> lock(request_lock_);
    complete_locked();
  }

private:
  // With request_lock_ held: the one place that waits on the request.
  void complete_locked() {
    if (request_ == nullptr)
      return;
    xcoll_status status = xcoll_wait(request_);
    request_ = nullptr;
    std::exception_ptr error;
    if (status != XCOLL_SUCCESS)
      error = std::make_exception_ptr(std::runtime_error(
          std::string("xcoll backend: ") + call_ + " failed: " +
          xcoll_strerror(status) + ": " + xcoll_comm_last_error(comm_)));
    complete_with(error);
    for (auto &follower : followers_)
      follower->complete_with(error);
    followers_.clear();
  }

  void complete_with(std::exception_ptr error) {
    request_ = nullptr;
    finished_ = true;
    std::optional<c10::StreamGuard> guard;
    if (stream_)
      guard.emplace(*stream_); // the future's events go on the call's stream
    if (!error) {
      try {
        if (after_)
          after_();
      } catch (...) {
        error = std::current_exception();
      }
    }
    keep_.clear();
    after_ = nullptr;
    finish(error);
    if (error)
      future_->setError(error);
    else
      future_->markCompleted(c10::IValue(outputs_));
  }

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

void WorkXcoll::want() {
  if (!queue_)
    return;
  std::lock_guard<std::mutex> lock(queue_->lock);
  if (!queued_ || wanted_)
    return;
  wanted_ = true;
  queue_->wanted++;
  queue_->cond.notify_one();
}

// ---- the backend ----

class BackendXcoll : public c10d::Backend {
public:
  // The group's backend: a host communicator made through store.
  BackendXcoll(const c10::intrusive_ptr<c10d::Store> &store, int rank,
               int size, std::chrono::milliseconds timeout)
      : Backend(rank, size), store_(store), timeout_(timeout) {
    auto bridge = std::make_shared<StoreBridge>();
    bridge->store = store;
    host_ = make_comm(bridge, c10::Device(c10::DeviceType::CPU));
    start();
  }

  // A split child: host is its host communicator (already made).
  BackendXcoll(const c10::intrusive_ptr<c10d::Store> &store, int rank,
               int size, std::chrono::milliseconds timeout,
               std::unique_ptr<Comm> host)
      : Backend(rank, size), store_(store), timeout_(timeout),
        host_(std::move(host)) {
    start();
  }

  ~BackendXcoll() override { shutdown(); }

  const std::string getBackendName() const override { return "xcoll"; }

  // The xcoll backend underneath (tcp, ucx, nccl_like).
  std::string transport() const { return xcoll_comm_backend(host_->comm); }

  c10::intrusive_ptr<Options> getBackendOptions() override {
    auto options = c10::make_intrusive<Options>("xcoll", timeout_);
    options->group_name = pg_uid_;
    return options;
  }

  void setTimeout(std::chrono::milliseconds timeout) override {
    // Communicators made from now on (devices, splits) take it; xcoll fixes
    // a communicator's timeout when it is made.
    timeout_ = timeout;
  }

  bool supportsSplitting() const override { return true; }
  bool supportsCoalescing() const override { return XCOLL_TORCH_HAVE_P2P; }

  void eagerConnectSingleDevice(at::Device device) override {
    if (device.is_cuda())
      comm_for(device, "eager connect");
  }

  c10d::ErrorType getError() override {
    std::lock_guard<std::mutex> lock(state_lock_);
    return aborted_ ? c10d::ErrorType::COMM_ERROR : c10d::ErrorType::SUCCESS;
  }

  // ncclCommSplit's way (xcoll_comm_split): every rank of this group calls
  // it, those outside ranks get no group (nullptr).
  c10::intrusive_ptr<Backend>
  split(const c10::intrusive_ptr<c10d::Store> &store,
        const std::vector<int> &ranks,
        const c10::intrusive_ptr<Options> &opts) override {
    check_open("split");
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    auto me = std::find(sorted.begin(), sorted.end(), rank_);
    // The groups of one split are disjoint: the smallest rank names one.
    int color = me == sorted.end() ? XCOLL_SPLIT_NOCOLOR : sorted[0];
    int key = static_cast<int>(me - sorted.begin());
    xcoll_comm_t child = nullptr;
    xcoll_status status;
    {
      std::lock_guard<std::mutex> lock(issue_lock_);
      status = xcoll_comm_split(host_->comm, color, key, &child);
    }
    check("split", status, host_->comm);
    split_count_++;
    if (child == nullptr)
      return nullptr;
    auto host = std::make_unique<Comm>();
    host->comm = child;
    host->bridge = host_->bridge; // the store must outlive the child
    auto backend = c10::make_intrusive<BackendXcoll>(
        store, key, static_cast<int>(sorted.size()),
        opts ? opts->timeout : timeout_, std::move(host));
    if (opts)
      backend->setGroupUid(opts->group_name);
    return backend;
  }

  int64_t split_count() const { return split_count_; }

  void abort() override {
    {
      std::lock_guard<std::mutex> lock(state_lock_);
      if (closed_)
        return;
      aborted_ = true;
    }
    // Safe from any thread while a call is blocked (xcoll_comm_abort).
    xcoll_comm_abort(host_->comm);
    std::lock_guard<std::mutex> lock(devices_lock_);
    for (auto &entry : devices_)
      xcoll_comm_abort(entry.second->comm);
  }

  // Completes what was issued, then frees the communicators; the group
  // takes no call afterwards.
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(state_lock_);
      if (closed_)
        return;
      closed_ = true;
    }
    {
      std::lock_guard<std::mutex> lock(queue_->lock);
      queue_->stopping = true; // the thread completes every work left
    }
    queue_->cond.notify_all();
    if (completer_.joinable())
      completer_.join();
    std::lock_guard<std::mutex> lock(devices_lock_);
    devices_.clear();
    host_.reset();
  }

  // ---- collectives ----
  //
  // Each call is one of two forms, sized by core's table of collectives
  // (flat_call, list_call below); the table's row says which tensor is the
  // send and which the receive buffer, how many elements each holds, and
  // whether the call takes an op, a root or a peer.

  c10::intrusive_ptr<c10d::Work>
  allreduce(std::vector<at::Tensor> &tensors,
            const c10d::AllreduceOptions &opts) override {
    at::Tensor tensor = single_tensor(tensors, "allreduce");
    return flat_call("allreduce", XCOLL_COLL_ALLREDUCE,
                     c10d::OpType::ALLREDUCE, tensor, tensor, &opts.reduceOp,
                     0, opts.asyncOp);
  }

  // DDP's and the coalescing manager's: one allreduce over the tensors laid
  // end to end, then each gets its part back.
  c10::intrusive_ptr<c10d::Work>
  allreduce_coalesced(std::vector<at::Tensor> &tensors,
                      const c10d::AllreduceCoalescedOptions &opts) override {
    const char *call = "allreduce_coalesced";
    TORCH_CHECK(!tensors.empty(), "xcoll backend: ", call, ": no tensors");
    for (const at::Tensor &t : tensors)
      check_alike(call, tensors[0], t);
    Staged s;
    s.send = s.recv = end_to_end(tensors);
    s.count = static_cast<size_t>(s.send.numel());
    s.outputs = tensors;
    s.after = split_back(s.send, tensors);
    return run(call, XCOLL_COLL_ALLREDUCE, c10d::OpType::COALESCED, tensors[0],
               &opts.reduceOp, 0, opts.asyncOp, std::move(s));
  }

  c10::intrusive_ptr<c10d::Work>
  broadcast(std::vector<at::Tensor> &tensors,
            const c10d::BroadcastOptions &opts) override {
    at::Tensor tensor = single_tensor(tensors, "broadcast");
    return flat_call("broadcast", XCOLL_COLL_BROADCAST,
                     c10d::OpType::BROADCAST, tensor, tensor, nullptr,
                     opts.rootRank, opts.asyncOp);
  }

  c10::intrusive_ptr<c10d::Work>
  reduce(std::vector<at::Tensor> &tensors,
         const c10d::ReduceOptions &opts) override {
    at::Tensor tensor = single_tensor(tensors, "reduce");
    return flat_call("reduce", XCOLL_COLL_REDUCE, c10d::OpType::REDUCE, tensor,
                     tensor, &opts.reduceOp, opts.rootRank, opts.asyncOp);
  }

  c10::intrusive_ptr<c10d::Work>
  allgather(std::vector<std::vector<at::Tensor>> &outputs,
            std::vector<at::Tensor> &inputs,
            const c10d::AllgatherOptions &opts) override {
    at::Tensor input = single_tensor(inputs, "allgather");
    return list_call("allgather", XCOLL_COLL_ALLGATHER,
                     c10d::OpType::ALLGATHER, input, outputs, nullptr, 0,
                     opts.asyncOp);
  }

  c10::intrusive_ptr<c10d::Work>
  _allgather_base(at::Tensor &output, at::Tensor &input,
                  const c10d::AllgatherOptions &opts) override {
    return flat_call("_allgather_base", XCOLL_COLL_ALLGATHER,
                     c10d::OpType::_ALLGATHER_BASE, input, output, nullptr, 0,
                     opts.asyncOp);
  }

  // The functional collectives' (FSDP2, DTensor) coalesced forms: one
  // xcoll call per pair, all of them one work.
  c10::intrusive_ptr<c10d::Work>
  allgather_into_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                  std::vector<at::Tensor> &inputs,
                                  const c10d::AllgatherOptions &opts) override {
    return coalesced("allgather_into_tensor_coalesced", outputs, inputs,
                     [&](at::Tensor &out, at::Tensor &in) {
                       return _allgather_base(out, in, opts);
                     });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
      const c10d::ReduceScatterOptions &opts) override {
    return coalesced("reduce_scatter_tensor_coalesced", outputs, inputs,
                     [&](at::Tensor &out, at::Tensor &in) {
                       return _reduce_scatter_base(out, in, opts);
                     });
  }

  c10::intrusive_ptr<c10d::Work>
  reduce_scatter(std::vector<at::Tensor> &outputs,
                 std::vector<std::vector<at::Tensor>> &inputs,
                 const c10d::ReduceScatterOptions &opts) override {
    at::Tensor output = single_tensor(outputs, "reduce_scatter");
    return list_call("reduce_scatter", XCOLL_COLL_REDUCE_SCATTER,
                     c10d::OpType::REDUCE_SCATTER, output, inputs,
                     &opts.reduceOp, 0, opts.asyncOp);
  }

  c10::intrusive_ptr<c10d::Work>
  _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                       const c10d::ReduceScatterOptions &opts) override {
    return flat_call("_reduce_scatter_base", XCOLL_COLL_REDUCE_SCATTER,
                     c10d::OpType::_REDUCE_SCATTER_BASE, input, output,
                     &opts.reduceOp, 0, opts.asyncOp);
  }

  // On the host communicator; with a device bound to the group
  // (init_process_group(device_id=...)), on that device's.
  c10::intrusive_ptr<c10d::Work>
  barrier(const c10d::BarrierOptions &opts) override {
    const char *call = "barrier";
    c10::Device device(c10::DeviceType::CPU);
    if (opts.device)
      device = *opts.device;
    else if (bound_device_id_)
      device = *bound_device_id_;
    Call c = begin(call,
                   device.is_cuda() ? device
                                    : c10::Device(c10::DeviceType::CPU),
                   opts.asyncOp);
    if (c.comm->stream_ordered) {
      // No stream argument in xcoll_ibarrier: a one-element allreduce on
      // the comm's stream orders it like the other calls.
      at::Tensor one = at::zeros({1}, at::TensorOptions().device(device));
      XcollArgs a(XCOLL_COLL_ALLREDUCE, XCOLL_FLOAT32);
      a.sendbuf = a.recvbuf = one.data_ptr();
      a.count = 1;
      issue(c, a);
      auto work = end(c, c10d::OpType::BARRIER, {}, {one}, nullptr);
      c.lock.unlock();
      work->complete_blocking(); // a barrier holds the host
      return work;
    }
    issue(c, XcollArgs(XCOLL_COLL_BARRIER, XCOLL_UINT8));
    return end(c, c10d::OpType::BARRIER, {}, {}, nullptr);
  }

  // ---- point to point, coalescing, alltoall, gather, scatter ----

#if XCOLL_TORCH_HAVE_P2P
  // torch's send and recv have no async flag (isend is send): the
  // non-blocking form, or the group's.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors,
                                      int dst, int /*tag: NCCL's way*/) override {
    return flat_call("send", XCOLL_COLL_SEND, c10d::OpType::SEND,
                     single_tensor(tensors, "send"), at::Tensor(), nullptr,
                     dst, true);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors,
                                      int src, int /*tag*/) override {
    return flat_call("recv", XCOLL_COLL_RECV, c10d::OpType::RECV, at::Tensor(),
                     single_tensor(tensors, "recv"), nullptr, src, true);
  }

  // batch_isend_irecv: the calls between start and end are one xcoll group
  // (xcoll_group_start ... xcoll_igroup_end), NCCL's coalescing.
  void startCoalescing() override {
    check_open("startCoalescing");
    TORCH_CHECK(!coalescing_, "xcoll backend: startCoalescing: already "
                              "coalescing (endCoalescing first)");
    issue_lock_.lock(); // one thread's group, until endCoalescing
    xcoll_status status = xcoll_group_start();
    if (status != XCOLL_SUCCESS) {
      issue_lock_.unlock();
      TORCH_CHECK(false, "xcoll backend: startCoalescing: ",
                  xcoll_strerror(status), ": ", xcoll_last_error());
    }
    issue_owner_ = std::this_thread::get_id();
    coalescing_ = true;
    coalesced_.clear();
    coalesced_comm_ = nullptr;
  }

  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    TORCH_CHECK(coalescing_, "xcoll backend: endCoalescing without "
                             "startCoalescing");
    coalescing_ = false;
    xcoll_request_t request = nullptr;
    xcoll_status status = xcoll_igroup_end(&request);
    std::vector<c10::intrusive_ptr<WorkXcoll>> members;
    members.swap(coalesced_);
    Comm *comm = coalesced_comm_ != nullptr ? coalesced_comm_ : host_.get();
    issue_lock_.unlock();
    check("endCoalescing", status, comm->comm);
    std::vector<at::Tensor> outputs;
    for (auto &member : members)
      for (const at::Tensor &t : member->outputs_)
        outputs.push_back(t);
    auto leader = c10::make_intrusive<WorkXcoll>(
        rank_, c10d::OpType::COALESCED, "coalesced calls", comm->comm, request,
        outputs, std::vector<at::Tensor>{}, nullptr, std::nullopt, nullptr);
    leader->followers_ = members; // completed with the group's request
    if (request == nullptr) // an empty group
      leader->complete_with(nullptr);
    else
      enqueue(leader, true); // its members' futures wait on it
    return leader;
  }
#else
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &, int,
                                      int) override {
    unsupported("send");
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &, int,
                                      int) override {
    unsupported("recv");
  }
  void startCoalescing() override { unsupported("startCoalescing"); }
  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    unsupported("endCoalescing");
  }
#endif

#if XCOLL_TORCH_HAVE_ALLTOALL
  // all_to_all_single: equal splits are xcoll_alltoall; split sizes (in
  // rows of dimension 0) are xcoll_alltoallv's counts and displacements.
  c10::intrusive_ptr<c10d::Work>
  alltoall_base(at::Tensor &output, at::Tensor &input,
                std::vector<int64_t> &output_splits,
                std::vector<int64_t> &input_splits,
                const c10d::AllToAllOptions &opts) override {
    const char *call = "alltoall_base";
    if (output_splits.empty() && input_splits.empty())
      return flat_call(call, XCOLL_COLL_ALLTOALL, c10d::OpType::ALLTOALL_BASE,
                       input, output, nullptr, 0, opts.asyncOp);
    check_alike(call, input, output);
    Staged s;
    split_counts(call, input, input_splits, s.per_peer[0], s.per_peer[1]);
    split_counts(call, output, output_splits, s.per_peer[2], s.per_peer[3]);
    s.send = input.contiguous();
    s.recv = output.contiguous();
    s.outputs = {output};
    s.after = copy_back(s.recv, output);
    return run(call, XCOLL_COLL_ALLTOALLV, c10d::OpType::ALLTOALL_BASE, input,
               nullptr, 0, opts.asyncOp, std::move(s));
  }

  // all_to_all with lists: the inputs end to end, xcoll_alltoallv, then
  // each output gets its block.
  c10::intrusive_ptr<c10d::Work>
  alltoall(std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
           const c10d::AllToAllOptions &opts) override {
    const char *call = "alltoall";
    TORCH_CHECK(outputs.size() == static_cast<size_t>(size_) &&
                    inputs.size() == static_cast<size_t>(size_),
                "xcoll backend: alltoall wants ", size_,
                " input and output tensors (one per rank), got ",
                inputs.size(), " and ", outputs.size());
    Staged s;
    size_t send_total = 0, recv_total = 0;
    for (int r = 0; r < size_; r++) {
      check_alike(call, inputs[0], inputs[r]);
      check_alike(call, inputs[0], outputs[r]);
      s.per_peer[0].push_back(inputs[r].numel());
      s.per_peer[1].push_back(send_total);
      send_total += inputs[r].numel();
      s.per_peer[2].push_back(outputs[r].numel());
      s.per_peer[3].push_back(recv_total);
      recv_total += outputs[r].numel();
    }
    s.send = end_to_end(inputs);
    s.recv =
        at::empty({static_cast<int64_t>(recv_total)}, inputs[0].options());
    s.outputs = outputs;
    s.after = split_back(s.recv, outputs);
    return run(call, XCOLL_COLL_ALLTOALLV, c10d::OpType::ALLTOALL, inputs[0],
               nullptr, 0, opts.asyncOp, std::move(s));
  }
#else
  c10::intrusive_ptr<c10d::Work>
  alltoall_base(at::Tensor &, at::Tensor &, std::vector<int64_t> &,
                std::vector<int64_t> &,
                const c10d::AllToAllOptions &) override {
    unsupported("alltoall_base (all_to_all_single)");
  }
  c10::intrusive_ptr<c10d::Work>
  alltoall(std::vector<at::Tensor> &, std::vector<at::Tensor> &,
           const c10d::AllToAllOptions &) override {
    unsupported("alltoall");
  }
#endif

#if XCOLL_TORCH_HAVE_GATHER
  c10::intrusive_ptr<c10d::Work>
  gather(std::vector<std::vector<at::Tensor>> &outputs,
         std::vector<at::Tensor> &inputs,
         const c10d::GatherOptions &opts) override {
    at::Tensor input = single_tensor(inputs, "gather");
    return list_call("gather", XCOLL_COLL_GATHER, c10d::OpType::GATHER, input,
                     outputs, nullptr, opts.rootRank, opts.asyncOp);
  }

  c10::intrusive_ptr<c10d::Work>
  scatter(std::vector<at::Tensor> &outputs,
          std::vector<std::vector<at::Tensor>> &inputs,
          const c10d::ScatterOptions &opts) override {
    at::Tensor output = single_tensor(outputs, "scatter");
    return list_call("scatter", XCOLL_COLL_SCATTER, c10d::OpType::SCATTER,
                     output, inputs, nullptr, opts.rootRank, opts.asyncOp);
  }
#else
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &,
                                        std::vector<at::Tensor> &,
                                        const c10d::GatherOptions &) override {
    unsupported("gather");
  }
  c10::intrusive_ptr<c10d::Work>
  scatter(std::vector<at::Tensor> &, std::vector<std::vector<at::Tensor>> &,
          const c10d::ScatterOptions &) override {
    unsupported("scatter");
  }
#endif

  // ---- what this backend does not offer: an error naming the call ----
  c10::intrusive_ptr<c10d::Work>
  allreduce_sparse(std::vector<at::Tensor> &,
                   const c10d::AllreduceOptions &) override {
    unsupported("allreduce_sparse");
  }
  c10::intrusive_ptr<c10d::Work>
  allgather_coalesced(std::vector<std::vector<at::Tensor>> &,
                      std::vector<at::Tensor> &,
                      const c10d::AllgatherOptions &) override {
    unsupported("allgather_coalesced");
  }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &,
                                               int) override {
    unsupported("recvAnysource (recv without a source)");
  }
  void monitoredBarrier(const c10d::BarrierOptions &, bool) override {
    unsupported("monitoredBarrier");
  }

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

  void start() {
    init(); // c10d's logging of the backend
    completer_ = std::thread([this] { completer_main(); });
  }

  std::unique_ptr<Comm> make_comm(std::shared_ptr<StoreBridge> bridge,
                                  c10::Device device) {
    xcoll_kv_store kv = bridge->kv();
    xcoll_config config;
    xcoll_config_init(&config);
    config.rank = rank_;
    config.world_size = size_;
    config.master_addr = std::getenv("MASTER_ADDR");
    // XCOLL_TIMEOUT_S, when set, wins over the group's timeout.
    config.timeout_s = std::getenv("XCOLL_TIMEOUT_S") != nullptr
                           ? 0.0
                           : static_cast<double>(timeout_.count()) / 1000.0;
    config.device = device.is_cuda() ? device.index() : XCOLL_DEVICE_HOST;
    auto comm = std::make_unique<Comm>();
    comm->device = device;
    comm->bridge = bridge;
    xcoll_status status = xcoll_comm_init_kv(&comm->comm, &config, &kv);
    TORCH_CHECK(status == XCOLL_SUCCESS, "xcoll backend: rank ", rank_, " of ",
                size_, " could not create its communicator for ", device,
                ": ", xcoll_strerror(status), ": ", xcoll_last_error(),
                bridge->last_error.empty() ? "" : " (store: ",
                bridge->last_error, bridge->last_error.empty() ? "" : ")");
    if (device.is_cuda() &&
        std::strcmp(xcoll_comm_backend(comm->comm), "nccl_like") == 0) {
      comm->stream_ordered = true;
      comm->stream = cuda_guard()->getStreamFromGlobalPool(device, false);
    }
    return comm;
  }

  // The communicator for tensors on device: the host's, or the one bound to
  // cuda:N (made on first use; every rank uses its devices in one order,
  // since calls are collective, so the k-th made meets its peers under the
  // store prefix "dev<k>/").
  Comm *comm_for(const c10::Device &device, const char *call) {
    if (device.is_cpu())
      return host_.get();
    TORCH_CHECK(device.is_cuda(), "xcoll backend: ", call, ": tensors on ",
                device, " are not supported (cpu and cuda are)");
    c10::Device indexed = device.has_index()
                              ? device
                              : cuda_guard()->getDevice();
    std::lock_guard<std::mutex> lock(devices_lock_);
    auto found = devices_.find(indexed.index());
    if (found != devices_.end())
      return found->second.get();
    auto bridge = std::make_shared<StoreBridge>();
    bridge->store = store_;
    bridge->prefix = "dev" + std::to_string(devices_.size()) + "/";
    Comm *comm = nullptr;
    {
      auto made = make_comm(bridge, indexed);
      comm = made.get();
      devices_[indexed.index()] = std::move(made);
    }
    return comm;
  }

  void check_open(const char *call) {
    std::lock_guard<std::mutex> lock(state_lock_);
    TORCH_CHECK(!closed_, "xcoll backend: ", call,
                ": the group was shut down");
  }

  // Picks the communicator and the form of the call (Call::blocking) and
  // takes the issue lock: xcoll wants one call at a time per communicator,
  // in one order on every rank.
  Call begin(const char *call, const c10::Device &device, bool async_op) {
    check_open(call);
    Call c;
    c.name = call;
    c.comm = comm_for(device, call);
    if (coalescing_ && issue_owner_ == std::this_thread::get_id()) {
      c.grouped = true;
      TORCH_CHECK(coalesced_comm_ == nullptr || coalesced_comm_ == c.comm,
                  "xcoll backend: ", call,
                  ": the calls of one coalescing group must be on one device");
      coalesced_comm_ = c.comm;
      return c;
    }
    c.blocking = !async_op && !c.comm->device.is_cuda();
    c.lock = std::unique_lock<std::mutex>(issue_lock_);
    return c;
  }

  // After the inputs are staged, just before the xcoll call: on a
  // stream-ordered communicator its stream waits for the caller's current
  // stream (so the call sees what was queued before it); on tcp/ucx with a
  // CUDA tensor xcoll is given the current stream to stage on.
  void launch(Call &c) {
    if (!c.comm->device.is_cuda())
      return;
    c10::Stream current = cuda_guard()->getStream(c.comm->device);
    if (c.grouped) {
      // xcoll's groups run on no stream of ours: what the caller queued
      // must be done before the group starts.
      c10::Event ready(c10::DeviceType::CUDA);
      ready.record(current);
      ready.synchronize();
      return;
    }
    if (c.comm->stream_ordered) {
      c10::Event ready(c10::DeviceType::CUDA);
      ready.record(current);
      ready.block(*c.comm->stream);
      c.stream = c.comm->stream;
    } else {
      c.stream = current;
    }
  }

  c10::intrusive_ptr<WorkXcoll> end(Call &c, c10d::OpType type,
                                     std::vector<at::Tensor> outputs,
                                     std::vector<at::Tensor> keep,
                                     std::function<void()> after) {
    std::shared_ptr<c10::Event> done;
    if (c.comm->stream_ordered && !c.grouped) {
      // The copies back go on the comm's stream after the kernel, the
      // allocator learns the tensors are in use there (recordStream), and
      // an event marks the end for Work::wait.
      c10::StreamGuard guard(*c.comm->stream);
      if (after)
        after();
      after = nullptr;
      for (const at::Tensor &t : keep)
        t.record_stream(*c.comm->stream);
      for (const at::Tensor &t : outputs)
        t.record_stream(*c.comm->stream);
      done = std::make_shared<c10::Event>(c10::DeviceType::CUDA);
      done->record(*c.comm->stream);
    }
    auto work = c10::make_intrusive<WorkXcoll>(
        rank_, type, c.name, c.comm->comm, c.request, std::move(outputs),
        std::move(keep), std::move(after), c.stream, std::move(done));
    if (c.blocking) { // done already: copy back, complete, no queue
      work->complete_with(nullptr);
      return work;
    }
    if (c.grouped) {
      coalesced_.push_back(work);
      return work;
    }
    // A stream-ordered call's wait holds no host thread: the completion
    // thread releases its request.
    enqueue(work, c.comm->stream_ordered);
    return work;
  }

  template <typename Fn>
  c10::intrusive_ptr<c10d::Work> coalesced(const char *call,
                                           std::vector<at::Tensor> &outputs,
                                           std::vector<at::Tensor> &inputs,
                                           Fn one) {
    TORCH_CHECK(outputs.size() == inputs.size(), "xcoll backend: ", call,
                ": as many outputs as inputs, please");
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (size_t i = 0; i < inputs.size(); i++)
      works.push_back(one(outputs[i], inputs[i]));
    // xcoll completes a communicator's calls in issue order: the last work
    // done means all are. The returned work waits for every one.
    return c10::make_intrusive<WorkList>(rank_, std::move(works), outputs);
  }

  // A work over several works (the coalesced forms above).
  class WorkList : public c10d::Work {
  public:
    WorkList(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works,
             std::vector<at::Tensor> outputs)
        : Work(rank, c10d::OpType::COALESCED), works_(std::move(works)),
          outputs_(std::move(outputs)) {
      // The list's future completes when every work's has, with the
      // first error among them.
      std::vector<c10::Device> devices;
      if (!outputs_.empty() && outputs_[0].is_cuda())
        devices.push_back(outputs_[0].device());
      future_ = c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), devices);
      struct Pending {
        std::mutex lock;
        size_t left;
        std::exception_ptr error;
      };
      auto pending = std::make_shared<Pending>();
      pending->left = works_.size();
      auto future = future_;
      auto outputs_copy = outputs_;
      if (works_.empty())
        future_->markCompleted(c10::IValue(outputs_copy));
      for (auto &w : works_)
        w->getFuture()->addCallback(
            [pending, future, outputs_copy](c10::ivalue::Future &done) {
              std::unique_lock<std::mutex> lock(pending->lock);
              if (done.hasError() && !pending->error)
                pending->error = done.exception_ptr();
              if (--pending->left > 0)
                return;
              std::exception_ptr error = pending->error;
              lock.unlock();
              if (error)
                future->setError(error);
              else
                future->markCompleted(c10::IValue(outputs_copy));
            });
    }
    bool isCompleted() override {
      for (auto &w : works_)
        if (!w->isCompleted())
          return false;
      return true;
    }
    bool wait(std::chrono::milliseconds timeout) override {
      for (auto &w : works_)
        w->wait(timeout);
      return true;
    }
    void synchronize() override {
      for (auto &w : works_)
        w->synchronize();
    }
    std::vector<at::Tensor> result() override { return outputs_; }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
      return future_;
    }

  private:
    std::vector<c10::intrusive_ptr<c10d::Work>> works_;
    std::vector<at::Tensor> outputs_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
  };

  // ---- the forms of a call, sized by core's table of collectives ----

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

  // Issues the call of kind on staged buffers: the communicator of like's
  // device, like's type, the op where the row has one, the root (or the
  // peer of send and recv), and the form async_op asks for (begin).
  c10::intrusive_ptr<c10d::Work>
  run(const char *call, xcoll_coll_kind kind, c10d::OpType type,
      const at::Tensor &like, const c10d::ReduceOp *reduce_op, int64_t root,
      bool async_op, Staged s) {
    Call c = begin(call, like.device(), async_op);
    XcollArgs a(kind, to_xcoll_dtype(like, call));
    std::optional<ReduceOpScope> op;
    if (xcoll_coll_info_of(kind)->has_op) {
      op.emplace(*reduce_op, like, a.dtype, c.comm->comm, call);
      a.op = op->get();
    }
    a.count = s.count;
    a.root = static_cast<int>(root);
    if (kind == XCOLL_COLL_ALLTOALLV)
      a.set_vectors(s.per_peer[0], s.per_peer[1], s.per_peer[2],
                    s.per_peer[3]);
    std::vector<at::Tensor> keep;
    if (s.send.defined()) {
      a.sendbuf = s.send.data_ptr();
      keep.push_back(s.send);
    }
    if (s.recv.defined()) {
      a.recvbuf = s.recv.data_ptr();
      if (!s.recv.is_same(s.send))
        keep.push_back(s.recv);
    }
    issue(c, a);
    return end(c, type, std::move(s.outputs), std::move(keep),
               std::move(s.after));
  }

  // A call on flat tensors: input is its send buffer and output its receive
  // buffer (one tensor for the in-place forms; undefined for the buffer its
  // row leaves unused: send's receive buffer, recv's send buffer). The
  // count argument comes from the tensor on the side that is not per rank
  // (allgather's input, reduce_scatter's output; alltoall's input over
  // world_size), and the other tensor must hold what the table says.
  // root: the root, or the peer of send and recv (ignored without either).
  // A tensor that is not contiguous is staged in a contiguous copy.
  c10::intrusive_ptr<c10d::Work>
  flat_call(const char *call, xcoll_coll_kind kind, c10d::OpType type,
            const at::Tensor &input, const at::Tensor &output,
            const c10d::ReduceOp *reduce_op, int64_t root, bool async_op) {
    const xcoll_coll_info *info = xcoll_coll_info_of(kind);
    check_root_or_peer(call, info, root);
    bool in_place =
        input.defined() && output.defined() && input.is_same(output);
    const at::Tensor &any = input.defined() ? input : output;
    Staged s;
    s.count = static_cast<size_t>(any.numel());
    if (input.defined() && output.defined() && !in_place) {
      check_alike(call, input, output);
      s.count = count_of(call, info, input, output);
      Shape shape = shape_of(call, kind, s.count, rank_ == root);
      expect_numel(call, "input", input, shape.send, info->send_per_rank,
                   s.count);
      expect_numel(call, "output", output, shape.recv, info->recv_per_rank,
                   s.count);
    }
    if (input.defined())
      s.send = input.contiguous();
    if (output.defined()) {
      s.recv = in_place ? s.send : output.contiguous();
      s.outputs = {output};
      s.after = copy_back(s.recv, output);
    } else {
      s.outputs = {input}; // send: nothing comes back
    }
    return run(call, kind, type, any, reduce_op, root, async_op,
               std::move(s));
  }

  // A list form (allgather, reduce_scatter, gather, scatter): tensor on one
  // side, and on the side the table has per rank one list of world_size
  // tensors of tensor's size (gather's outputs and scatter's inputs on the
  // root only). The list is laid end to end in one flat buffer of the
  // table's size, which xcoll writes (outputs) or reads (inputs).
  c10::intrusive_ptr<c10d::Work>
  list_call(const char *call, xcoll_coll_kind kind, c10d::OpType type,
            const at::Tensor &tensor,
            std::vector<std::vector<at::Tensor>> &lists,
            const c10d::ReduceOp *reduce_op, int64_t root, bool async_op) {
    const xcoll_coll_info *info = xcoll_coll_info_of(kind);
    check_root_or_peer(call, info, root);
    bool list_is_output = info->recv_per_rank != 0;
    const char *list_name = list_is_output ? "output" : "input";
    bool list_root_only =
        list_is_output ? info->recv_root_only : info->send_root_only;
    bool list_used = !list_root_only || rank_ == root;
    Staged s;
    s.count = static_cast<size_t>(tensor.numel());
    Shape shape = shape_of(call, kind, s.count, rank_ == root);
    std::vector<at::Tensor> list;
    if (list_used) {
      TORCH_CHECK(lists.size() == 1 &&
                      lists[0].size() == static_cast<size_t>(size_),
                  "xcoll backend: ", call, " wants",
                  list_root_only ? " on the root" : "", " one list of ",
                  size_, " ", list_name, " tensors");
      list = lists[0];
      for (size_t r = 0; r < list.size(); r++) {
        check_alike(call, tensor, list[r]);
        TORCH_CHECK(static_cast<size_t>(list[r].numel()) == s.count,
                    "xcoll backend: ", call, ": ", list_name, " tensor ", r,
                    " holds ", list[r].numel(), " elements, expected ",
                    s.count, " (as many as the ",
                    list_is_output ? "input" : "output", " tensor)");
      }
    }
    at::Tensor single = tensor.contiguous();
    at::Tensor flat;
    if (list_used)
      flat = list_is_output
                 ? at::empty({static_cast<int64_t>(shape.recv)},
                             tensor.options())
                 : end_to_end(list);
    TORCH_INTERNAL_ASSERT(
        !list_used || static_cast<size_t>(flat.numel()) ==
                          (list_is_output ? shape.recv : shape.send));
    if (list_is_output) {
      s.send = single;
      s.recv = flat;
      s.outputs = list;
      if (list_used)
        s.after = split_back(flat, list);
    } else {
      s.send = flat;
      s.recv = single;
      s.outputs = {tensor};
      s.after = copy_back(single, tensor);
    }
    return run(call, kind, type, tensor, reduce_op, root, async_op,
               std::move(s));
  }

  // Issues a on c's communicator once the caller's stream is ordered before
  // it (launch): the blocking form when the call runs inline or is recorded
  // in a coalescing group, else the non-blocking form, its request in c.
  void issue(Call &c, const XcollArgs &a) {
    launch(c);
    check(c.name,
          call_xcoll(a, c.comm->comm, c.blocking || c.grouped,
                     c.native_stream(), &c.request),
          c.comm->comm);
  }

  // Elements of the send and receive buffers of a call of kind with count
  // on this rank, from core's table (xcoll_coll_shape).
  struct Shape {
    size_t send = 0, recv = 0;
  };
  Shape shape_of(const char *call, xcoll_coll_kind kind, size_t count,
                 bool is_root) {
    Shape shape;
    xcoll_status status = xcoll_coll_shape(kind, count, size_, is_root,
                                           &shape.send, &shape.recv, nullptr);
    TORCH_CHECK(status == XCOLL_SUCCESS, "xcoll backend: ", call, ": ",
                count, " elements per rank at world_size ", size_,
                " overflow a size: ", xcoll_strerror(status));
    return shape;
  }

  // The count argument of a call on two flat tensors (the table's
  // count_name): the tensor on the side that is not per rank sets it; with
  // both per rank (alltoall) it is the input's elements over world_size.
  size_t count_of(const char *call, const xcoll_coll_info *info,
                  const at::Tensor &input, const at::Tensor &output) {
    if (!info->send_per_rank)
      return static_cast<size_t>(input.numel());
    if (!info->recv_per_rank)
      return static_cast<size_t>(output.numel());
    TORCH_CHECK(input.numel() % size_ == 0, "xcoll backend: ", call,
                ": the input tensor holds ", input.numel(),
                " elements, not a multiple of world_size (", size_, ")");
    return static_cast<size_t>(input.numel() / size_);
  }

  // t (the call's input or output tensor) must hold expected elements:
  // world_size times count where its side is per rank.
  void expect_numel(const char *call, const char *what, const at::Tensor &t,
                    size_t expected, bool per_rank, size_t count) {
    if (static_cast<size_t>(t.numel()) == expected)
      return;
    std::string why = per_rank ? " (world_size " + std::to_string(size_) +
                                     " x " + std::to_string(count) +
                                     " elements per rank)"
                               : "";
    TORCH_CHECK(false, "xcoll backend: ", call, ": the ", what,
                " tensor holds ", t.numel(), " elements, expected ", expected,
                why);
  }

  void check_root_or_peer(const char *call, const xcoll_coll_info *info,
                          int64_t root) {
    if (info->has_root)
      check_root(call, root);
    if (info->has_peer)
      check_peer(call, root);
  }

  // Tensors of one call share a type and a device.
  static void check_alike(const char *call, const at::Tensor &first,
                          const at::Tensor &other) {
    TORCH_CHECK(first.scalar_type() == other.scalar_type() &&
                    first.device() == other.device(),
                "xcoll backend: ", call,
                ": every tensor must have one type and device (",
                first.scalar_type(), " on ", first.device(), " and ",
                other.scalar_type(), " on ", other.device(), ")");
  }

  // The tensors laid end to end in one flat tensor.
  static at::Tensor end_to_end(const std::vector<at::Tensor> &tensors) {
    std::vector<at::Tensor> flat;
    for (const at::Tensor &t : tensors)
      flat.push_back(t.reshape({-1}));
    return at::cat(flat);
  }

  // The inverse: each target gets its block of flat, laid end to end.
  static std::function<void()> split_back(const at::Tensor &flat,
                                          std::vector<at::Tensor> targets) {
    return [flat, targets]() {
      int64_t offset = 0;
      for (const at::Tensor &t : targets) {
        const_cast<at::Tensor &>(t).copy_(
            flat.narrow(0, offset, t.numel()).view(t.sizes()));
        offset += t.numel();
      }
    };
  }

  static void check(const char *call, xcoll_status status, xcoll_comm_t comm) {
    TORCH_CHECK(status == XCOLL_SUCCESS, "xcoll backend: ", call, ": ",
                xcoll_strerror(status), ": ", xcoll_comm_last_error(comm));
  }

  void check_root(const char *call, int64_t root) {
    TORCH_CHECK(root >= 0 && root < size_, "xcoll backend: ", call, ": root ",
                root, " is outside [0, ", size_, ")");
  }

  void check_peer(const char *call, int peer) {
    TORCH_CHECK(peer >= 0 && peer < size_ && peer != rank_, "xcoll backend: ",
                call, ": peer ", peer, " is not another rank of [0, ", size_,
                ")");
  }

  at::Tensor single_tensor(std::vector<at::Tensor> &tensors, const char *call) {
    TORCH_CHECK(tensors.size() == 1, "xcoll backend: ", call,
                " takes one tensor per process (got ", tensors.size(), ")");
    return tensors[0];
  }

  // Counts and displacements in elements of an all_to_all_single split
  // along dimension 0 (empty splits: equal ones).
  void split_counts(const char *call, const at::Tensor &t,
                    const std::vector<int64_t> &splits,
                    std::vector<size_t> &counts, std::vector<size_t> &displs) {
    int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    int64_t row = rows == 0 ? 0 : t.numel() / rows;
    TORCH_CHECK(splits.empty() || splits.size() == static_cast<size_t>(size_),
                "xcoll backend: ", call, ": ", size_,
                " split sizes wanted, got ", splits.size());
    TORCH_CHECK(!splits.empty() || rows % size_ == 0, "xcoll backend: ", call,
                ": ", rows, " rows do not split evenly over ", size_,
                " ranks");
    size_t offset = 0;
    int64_t total = 0;
    for (int r = 0; r < size_; r++) {
      int64_t n = splits.empty() ? rows / size_ : splits[r];
      counts.push_back(static_cast<size_t>(n * row));
      displs.push_back(offset);
      offset += static_cast<size_t>(n * row);
      total += n;
    }
    TORCH_CHECK(total == rows, "xcoll backend: ", call, ": split sizes add "
                "up to ", total, " rows, the tensor has ", rows);
  }

  // When work is a contiguous copy of tensor, copy the result back.
  static std::function<void()> copy_back(const at::Tensor &work,
                                         const at::Tensor &tensor) {
    if (work.data_ptr() == tensor.data_ptr())
      return nullptr;
    return [work, tensor]() mutable { tensor.copy_(work); };
  }

  // Queues work for completion; wanted: the completion thread must complete
  // it (see CompletionQueue). Works at the front that their callers
  // completed leave the queue here, in the caller's thread, so that a
  // blocking call wakes nobody.
  void enqueue(const c10::intrusive_ptr<WorkXcoll> &work, bool wanted) {
    CompletionQueue &q = *queue_;
    std::lock_guard<std::mutex> lock(q.lock);
    while (!q.works.empty() && q.works.front()->finished_ &&
           !q.works.front()->wanted_) {
      q.works.front()->queued_ = false;
      q.works.pop_front();
    }
    work->queue_ = queue_;
    work->queued_ = true;
    work->wanted_ = wanted;
    q.works.push_back(work);
    if (wanted)
      q.wanted++;
    if (wanted || q.works.size() > CompletionQueue::kMaxUnwaited)
      q.cond.notify_one();
  }

  // Completes works in issue order when one of them is wanted, when too
  // many are left unwaited, or at shutdown (all of them).
  void completer_main() {
    CompletionQueue &q = *queue_;
    for (;;) {
      c10::intrusive_ptr<WorkXcoll> work;
      {
        std::unique_lock<std::mutex> lock(q.lock);
        q.cond.wait(lock, [&q] {
          return q.stopping || q.wanted > 0 ||
                 q.works.size() > CompletionQueue::kMaxUnwaited;
        });
        if (q.works.empty())
          return; // stopping, with nothing left
        work = q.works.front();
        q.works.pop_front();
        work->queued_ = false;
        if (work->wanted_) {
          work->wanted_ = false;
          q.wanted--;
        }
      }
      work->complete_blocking();
    }
  }

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

namespace {

c10::intrusive_ptr<xcoll_torch::BackendXcoll>
make_backend(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
             std::chrono::milliseconds timeout, const std::string &group_name) {
  auto backend =
      c10::make_intrusive<xcoll_torch::BackendXcoll>(store, rank, size, timeout);
  if (!group_name.empty())
    backend->setGroupUid(group_name);
  return backend;
}

} // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch.distributed backend \"xcoll\" over xcoll's C API (the "
            "xcoll_torch package registers it)";
  // The base classes' Python types must exist before ours refer to them.
  py::module_::import("torch.distributed");
  py::class_<xcoll_torch::BackendXcoll, c10d::Backend,
             c10::intrusive_ptr<xcoll_torch::BackendXcoll>>(m, "BackendXcoll")
      .def(py::init(&make_backend), py::arg("store"), py::arg("rank"),
           py::arg("size"), py::arg("timeout"), py::arg("group_name") = "",
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("transport",
                             &xcoll_torch::BackendXcoll::transport,
                             "The xcoll backend underneath: tcp, ucx or "
                             "nccl_like (XCOLL_BACKEND)")
      .def("comm_split_count", &xcoll_torch::BackendXcoll::split_count)
      // torch calls this on the ranks left out of a new group when the
      // default group can split (ProcessGroupNCCL's ncclCommSplit with no
      // color). xcoll's new groups are made through the store, not split,
      // so there is nothing to take part in.
      .def("perform_nocolor_split", [](xcoll_torch::BackendXcoll &,
                                       const py::object &) {});
  m.def("create_backend", &make_backend, py::arg("store"), py::arg("rank"),
        py::arg("size"), py::arg("timeout"), py::arg("group_name") = "",
        py::call_guard<py::gil_scoped_release>(),
        "(store, rank, size, timeout, group_name) -> the xcoll Backend");
  m.attr("xcoll_version") = xcoll_version();
  m.attr("have_p2p") = static_cast<bool>(XCOLL_TORCH_HAVE_P2P);
  m.attr("have_alltoall") = static_cast<bool>(XCOLL_TORCH_HAVE_ALLTOALL);
  m.attr("have_gather") = static_cast<bool>(XCOLL_TORCH_HAVE_GATHER);
}
