// The braid_torch._C extension: the ProcessGroupBraid class and the creator that
// braid_torch/__init__.py registers with torch.distributed.Backend.register_backend.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "allocator.h"
#include "placement.h"
#include "process_group.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  // c10d's base classes (ProcessGroup or Backend, Store, Work) are registered with pybind11 by
  // torch.distributed; our class refers to them, so they must exist first.
  py::module_::import("torch.distributed");
  m.doc() = "braid collectives as a torch.distributed backend (use: import braid_torch)";

  py::class_<braid_torch::ProcessGroupBraid, braid_torch::GroupBase,
             c10::intrusive_ptr<braid_torch::ProcessGroupBraid>>(m, "ProcessGroupBraid");

  // The creator's arguments are the ones torch.distributed passes a plugin backend:
  // (prefix_store, group_rank, group_size, timeout). It blocks in the rendezvous: drop the GIL.
  m.def("create_process_group", &braid_torch::ProcessGroupBraid::create, py::arg("store"), py::arg("rank"),
        py::arg("size"), py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
        "Joins the braid communicator of a process group: rank 0 publishes a braid unique id in the store, "
        "the others read it. Blocks until every rank joined.");

  // braid_torch/__init__.py registers it with atexit: it runs before Python tears down the objects
  // (process groups, Works) that still hold communicators, in whatever order it would do that.
  m.def("_end_all", &braid_torch::Comm::endAll, py::arg("abort") = false,
        "Ends every braid communicator still open: destroyed when nothing is pending, aborted (the peers get "
        "an error naming this rank) when an operation still waits for a peer, or when abort is true.");

  m.def("use_shared_memory", &braid_torch::useSharedMemory, py::arg("enabled") = true,
        py::arg("min_bytes") = size_t{1} << 20,
        "CPU tensors of at least min_bytes allocated from now on come from braidMemAlloc (shared memory the "
        "ranks of one host map), so braid's collectives on them run in place in the peers' buffers; False "
        "turns it off for later allocations.");
  m.def("uses_shared_memory", &braid_torch::usesSharedMemory);

  int version = 0;
  (void)braidGetVersion(&version);
  m.attr("braid_version") = version;
  m.attr("torch_version_major") = TORCH_VERSION_MAJOR;
  // Built against a torch with CUDA (and a braid with it): CUDA tensors are taken too.
  m.attr("cuda_tensors") = static_cast<bool>(BRAID_TORCH_CUDA);
}
