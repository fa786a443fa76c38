// backend_xcoll_issue.cpp - one call of the torch backend "xcoll" made on
// xcoll: the xcoll type and op of a tensor and a c10d::ReduceOp, the one
// function that names xcoll's collective functions (call_xcoll), and the
// steps every call takes: begin (its communicator and form), launch (stream
// order), issue, end (its WorkXcoll), and run, which joins them.

#include "backend_xcoll.h"

namespace xcoll_torch {

namespace {

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

// Picks the communicator and the form of the call (Call::blocking) and
// takes the issue lock: xcoll wants one call at a time per communicator,
// in one order on every rank.
BackendXcoll::Call BackendXcoll::begin(const char *call,
                                       const c10::Device &device,
                                       bool async_op) {
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
void BackendXcoll::launch(Call &c) {
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

c10::intrusive_ptr<WorkXcoll> BackendXcoll::end(Call &c, c10d::OpType type,
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

// Issues the call of kind on staged buffers: the communicator of like's
// device, like's type, the op where the row has one, the root (or the
// peer of send and recv), and the form async_op asks for (begin).
c10::intrusive_ptr<c10d::Work>
BackendXcoll::run(const char *call, xcoll_coll_kind kind, c10d::OpType type,
                  const at::Tensor &like, const c10d::ReduceOp *reduce_op,
                  int64_t root, bool async_op, Staged s) {
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

// Issues a on c's communicator once the caller's stream is ordered before
// it (launch): the blocking form when the call runs inline or is recorded
// in a coalescing group, else the non-blocking form, its request in c.
void BackendXcoll::issue(Call &c, const XcollArgs &a) {
  launch(c);
  check(c.name,
        call_xcoll(a, c.comm->comm, c.blocking || c.grouped,
                   c.native_stream(), &c.request),
        c.comm->comm);
}

void BackendXcoll::check(const char *call, xcoll_status status,
                         xcoll_comm_t comm) {
  TORCH_CHECK(status == XCOLL_SUCCESS, "xcoll backend: ", call, ": ",
              xcoll_strerror(status), ": ", xcoll_comm_last_error(comm));
}

} // namespace xcoll_torch
