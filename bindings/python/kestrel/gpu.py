"""This host's GPUs: inventory, selection, and CUDA_VISIBLE_DEVICES for this process or a child."""
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._html import HtmlList
from .errors import check
from .ffi import C, ffi


@dataclass(frozen=True)
class GPU:
    """One GPU as NVML (and, with cuda=True, CUDA) reports it; memory in bytes, utilization in %."""
    uuid: str
    name: str
    pci_bus_id: str
    memory_total: int
    memory_free: int
    utilization: Optional[int]
    compute_capability: Optional[Tuple[int, int]]
    multiprocessors: Optional[int]
    is_mig: bool
    visible: bool

    def _repr_html_(self) -> str:
        mem = f"{self.memory_free >> 20} / {self.memory_total >> 20} MiB free" if self.memory_total >= 0 else "-"
        return f"<b>{self.name}</b> {self.uuid} ({self.pci_bus_id}) {mem}"


class Devices(HtmlList):
    """GPUs (a table in Jupyter)."""
    HEADERS = ("uuid", "name", "pci", "memory free / total", "utilization", "cc", "visible")

    @staticmethod
    def row(d: GPU) -> Sequence[Any]:
        """One table row of a device."""
        mem = f"{d.memory_free >> 20} / {d.memory_total >> 20} MiB" if d.memory_total >= 0 else "-"
        cc = "%d.%d" % d.compute_capability if d.compute_capability else "-"
        util = f"{d.utilization} %" if d.utilization is not None else "-"
        return (d.uuid, d.name, d.pci_bus_id, mem, util, cc, "yes" if d.visible else "no")


def _gpu(g: Any) -> GPU:
    s: Callable[[Any], str] = lambda p: str(ffi.string(p).decode()) if p != ffi.NULL else ""  # noqa: E731
    return GPU(s(g.uuid), s(g.name), s(g.pci_bus_id), g.memory_total, g.memory_free,
               g.utilization_gpu if g.utilization_gpu >= 0 else None,
               (g.cc_major, g.cc_minor) if g.cc_major >= 0 else None,
               g.multiprocessors if g.multiprocessors >= 0 else None, bool(g.is_mig), bool(g.visible))


def _query(all_devices: bool = False, cuda: bool = False) -> Any:
    out = ffi.new("kestrel_gpu_list **")
    flags = (C.KESTREL_GPU_QUERY_ALL if all_devices else 0) | (C.KESTREL_GPU_QUERY_CUDA if cuda else 0)
    check(C.kestrel_gpu_list_query(out, flags))
    return ffi.gc(out[0], C.kestrel_gpu_list_free)


def devices(all: bool = False, cuda: bool = False) -> List[GPU]:
    """This host's GPUs in PCI order ([] without a driver). all=True includes those hidden by
    CUDA_VISIBLE_DEVICES; cuda=True reads multiprocessor counts (in a child process)."""
    lst = _query(all, cuda)
    return Devices(_gpu(C.kestrel_gpu_list_get(lst, i)) for i in range(C.kestrel_gpu_list_count(lst)))


@dataclass(frozen=True)
class Selection:
    """The devices select_devices() chose, and why each other one was not."""
    devices: List[GPU]
    rejected: Dict[str, str]   # uuid -> why it was not chosen

    @property
    def visible_devices(self) -> str:
        """The CUDA_VISIBLE_DEVICES value that shows a process exactly the selected devices."""
        return ",".join(d.uuid for d in self.devices)

    def env(self) -> Dict[str, str]:
        """The environment for a child process that should use these devices."""
        return {"CUDA_VISIBLE_DEVICES": self.visible_devices, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def _select(count: int, min_memory: Optional[int], min_free: Optional[int], min_cc: Optional[Tuple[int, int]],
            max_utilization: Optional[int], name: Optional[str], exclude: Sequence[str], prefer_nvlink: bool,
            allow_mig: bool) -> Tuple[Any, Any, Selection]:
    lst = _query()
    opts = ffi.new("kestrel_gpu_select_options *")
    check(C.kestrel_gpu_select_options_init(opts, C.KESTREL_GPU_SELECT_OPTIONS_VERSION))
    keep: List[Any] = []
    opts.count = count
    opts.min_total_memory = int(min_memory or 0)
    opts.min_free_memory = int(min_free or 0)
    if min_cc:
        opts.min_cc_major, opts.min_cc_minor = min_cc
    opts.max_utilization = int(max_utilization or 0)
    if name:
        keep.append(ffi.new("char[]", name.encode()))
        opts.name_pattern = keep[-1]
    if exclude:
        keep.extend(ffi.new("char[]", e.encode()) for e in exclude)
        arr = ffi.new("const char *[]", keep[-len(exclude):] + [ffi.NULL])
        keep.append(arr)
        opts.exclude = arr
    opts.prefer_nvlink = 1 if prefer_nvlink else 0
    opts.allow_mig = 1 if allow_mig else 0
    out = ffi.new("kestrel_gpu_selection **")
    rc = C.kestrel_gpu_select(out, lst, opts)
    sel = ffi.gc(out[0], C.kestrel_gpu_selection_free) if out[0] != ffi.NULL else None
    check(rc)
    chosen = [_gpu(C.kestrel_gpu_list_get(lst, C.kestrel_gpu_selection_at(sel, i)))
              for i in range(C.kestrel_gpu_selection_count(sel))]
    rejected: Dict[str, str] = {}
    for i in range(C.kestrel_gpu_list_count(lst)):
        why = ffi.string(C.kestrel_gpu_selection_reason(sel, i)).decode()
        if why:
            rejected[ffi.string(C.kestrel_gpu_list_get(lst, i).uuid).decode()] = why
    return lst, sel, Selection(chosen, rejected)


def select_devices(count: int = 1, *, min_memory: Optional[int] = None, min_free: Optional[int] = None,
                   min_cc: Optional[Tuple[int, int]] = None, max_utilization: Optional[int] = None, name: Optional[str] = None,
                   exclude: Sequence[str] = (), prefer_nvlink: bool = False, allow_mig: bool = False) -> Selection:
    """Choose count devices (memory in bytes). Raises NotFoundError when not enough qualify."""
    return _select(count, min_memory, min_free, min_cc, max_utilization, name, exclude, prefer_nvlink, allow_mig)[2]


def use_devices(count: int = 1, **criteria: Any) -> Selection:
    """Select devices and make this process use them: sets os.environ CUDA_VISIBLE_DEVICES (and
    CUDA_DEVICE_ORDER) before a framework loads CUDA; MisuseError once CUDA is already loaded."""
    lst, sel, result = _select(count, criteria.get("min_memory"), criteria.get("min_free"), criteria.get("min_cc"),
                               criteria.get("max_utilization"), criteria.get("name"), criteria.get("exclude", ()),
                               criteria.get("prefer_nvlink", False), criteria.get("allow_mig", False))
    check(C.kestrel_gpu_selection_apply(sel))   # refuses when libcuda is loaded
    os.environ.update(result.env())             # the C setenv is not seen by os.environ
    del lst
    return result
