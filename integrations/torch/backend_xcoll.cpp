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
//
// This file makes, splits and ends the group and its communicators, and
// holds the Python module. The other parts: backend_xcoll_coll.cpp (the
// collectives), backend_xcoll_p2p.cpp (send, recv, coalescing, alltoall,
// gather, scatter), backend_xcoll_issue.cpp (one call made on xcoll),
// backend_xcoll_work.cpp (the work and the completion thread); what they
// share is in backend_xcoll.h.
#include "backend_xcoll.h"

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

} // namespace

[[noreturn]] void unsupported(const char *call) {
  TORCH_CHECK(false, "xcoll backend: ", call,
              " is not supported (supported: ", supported_calls(), ")");
}

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

const c10::impl::DeviceGuardImplInterface *cuda_guard() {
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
}

// The group's backend: a host communicator made through store.
BackendXcoll::BackendXcoll(const c10::intrusive_ptr<c10d::Store> &store,
                           int rank, int size,
                           std::chrono::milliseconds timeout)
    : Backend(rank, size), store_(store), timeout_(timeout) {
  auto bridge = std::make_shared<StoreBridge>();
  bridge->store = store;
  host_ = make_comm(bridge, c10::Device(c10::DeviceType::CPU));
  start();
}

// A split child: host is its host communicator (already made).
BackendXcoll::BackendXcoll(const c10::intrusive_ptr<c10d::Store> &store,
                           int rank, int size,
                           std::chrono::milliseconds timeout,
                           std::unique_ptr<Comm> host)
    : Backend(rank, size), store_(store), timeout_(timeout),
      host_(std::move(host)) {
  start();
}

BackendXcoll::~BackendXcoll() {
  shutdown();
}

c10::intrusive_ptr<c10d::Backend::Options> BackendXcoll::getBackendOptions() {
  auto options = c10::make_intrusive<Options>("xcoll", timeout_);
  options->group_name = pg_uid_;
  return options;
}

void BackendXcoll::setTimeout(std::chrono::milliseconds timeout) {
  // Communicators made from now on (devices, splits) take it; xcoll fixes
  // a communicator's timeout when it is made.
  timeout_ = timeout;
}

void BackendXcoll::eagerConnectSingleDevice(at::Device device) {
  if (device.is_cuda())
    comm_for(device, "eager connect");
}

c10d::ErrorType BackendXcoll::getError() {
  std::lock_guard<std::mutex> lock(state_lock_);
  return aborted_ ? c10d::ErrorType::COMM_ERROR : c10d::ErrorType::SUCCESS;
}

// ncclCommSplit's way (xcoll_comm_split): every rank of this group calls
// it, those outside ranks get no group (nullptr).
c10::intrusive_ptr<c10d::Backend>
BackendXcoll::split(const c10::intrusive_ptr<c10d::Store> &store,
                    const std::vector<int> &ranks,
                    const c10::intrusive_ptr<c10d::Backend::Options> &opts) {
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

void BackendXcoll::abort() {
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
void BackendXcoll::shutdown() {
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

// ---- what this backend does not offer: an error naming the call ----
c10::intrusive_ptr<c10d::Work>
BackendXcoll::allreduce_sparse(std::vector<at::Tensor> &,
                               const c10d::AllreduceOptions &) {
  unsupported("allreduce_sparse");
}

c10::intrusive_ptr<c10d::Work>
BackendXcoll::allgather_coalesced(std::vector<std::vector<at::Tensor>> &,
                                  std::vector<at::Tensor> &,
                                  const c10d::AllgatherOptions &) {
  unsupported("allgather_coalesced");
}

c10::intrusive_ptr<c10d::Work>
BackendXcoll::recvAnysource(std::vector<at::Tensor> &, int) {
  unsupported("recvAnysource (recv without a source)");
}

void BackendXcoll::monitoredBarrier(const c10d::BarrierOptions &, bool) {
  unsupported("monitoredBarrier");
}

void BackendXcoll::start() {
  init(); // c10d's logging of the backend
  completer_ = std::thread([this] { completer_main(); });
}

std::unique_ptr<Comm>
BackendXcoll::make_comm(std::shared_ptr<StoreBridge> bridge,
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
Comm *BackendXcoll::comm_for(const c10::Device &device, const char *call) {
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

void BackendXcoll::check_open(const char *call) {
  std::lock_guard<std::mutex> lock(state_lock_);
  TORCH_CHECK(!closed_, "xcoll backend: ", call,
              ": the group was shut down");
}

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
