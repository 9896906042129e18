"""GPU hardware profiles and the compatibility guardrails.

A profile (group data `gpu_profiles`, chosen per host by `gpu_profile`) says what a host's GPUs
must look like. `guardrails(settings)` checks the driver, CUDA, clocks and the vLLM service
settings against the profile and `llmfleet.compat`'s table; it runs with the settings validation,
in pyinfra's prepare phase, so a host is never touched with a combination its GPUs cannot run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from llmfleet import compat

if TYPE_CHECKING:
    from llmfleet.settings import Settings

Flavour = Literal["proprietary", "open"]


class AppClocks(BaseModel):
    """Application clocks in MHz. nvidia-smi takes them memory first: `nvidia-smi -ac MEMORY,GRAPHICS`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    memory: int = Field(gt=0)
    graphics: int = Field(gt=0)


class GpuProfile(BaseModel):
    """What a host's GPUs must look like (documented field by field in group_data/all.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_name: str
    pci_device_id: str = Field(pattern=r"^0x[0-9a-f]{4}$")
    count: int = Field(gt=0)
    memory_mib: int = Field(gt=0)
    memory_bandwidth_gbs: float = Field(gt=0)
    pcie_gen: int = Field(ge=1, le=6)
    pcie_width: int = Field(ge=1, le=32)
    nvlink_links: int = Field(ge=0)
    compute_capability: float = Field(gt=0)
    driver_flavours: list[Flavour] = Field(min_length=1)
    driver_branch_min: int
    driver_branch_max: int | None
    cuda_max_major: int | None
    memory_errors: Literal["page_retirement", "row_remapping"]
    # memory clock (MHz) -> [lowest, highest] graphics clock (MHz) supported with it
    supported_clocks: dict[int, tuple[int, int]] = Field(min_length=1)
    app_clocks: AppClocks
    # the interconnect (verify/test_gpu_interconnect.py, onboarding acceptance):
    # "i-j" -> NVLink links between GPU i and GPU j; pairs left out go over PCIe
    nvlink_pairs: dict[Annotated[str, Field(pattern=r"^[0-9]+-[0-9]+$")], Annotated[int, Field(gt=0)]] = {}
    gpu_numa_nodes: list[int] | None = None  # NUMA node of each GPU (None: not checked)
    p2p: Literal["nvlink_pairs", "all_pairs", "none"] = "nvlink_pairs"  # where peer access must work
    allreduce_min_busbw_gbs: dict[Annotated[int, Field(gt=0)], Annotated[float, Field(gt=0)]] = {}  # MiB -> GB/s
    source: str

    @model_validator(mode="after")
    def _interconnect_fits_count(self):
        for key in self.nvlink_pairs:
            i, j = (int(x) for x in key.split("-"))
            if i == j or max(i, j) >= self.count:
                raise ValueError(f"nvlink_pairs key {key!r}: needs two different GPU indexes below count "
                                 f"{self.count}")
        if len({tuple(sorted(k.split("-"))) for k in self.nvlink_pairs}) != len(self.nvlink_pairs):
            raise ValueError("nvlink_pairs names a pair twice (as i-j and j-i)")
        if self.gpu_numa_nodes is not None and len(self.gpu_numa_nodes) != self.count:
            raise ValueError(f"gpu_numa_nodes has {len(self.gpu_numa_nodes)} entries, count is {self.count}")
        if self.count < 2 and self.allreduce_min_busbw_gbs:
            raise ValueError("allreduce_min_busbw_gbs on a one-GPU profile: there is no all-reduce to measure")
        return self

    @property
    def arch(self) -> str:
        """"7.0" -> "sm_70"."""
        major, minor = f"{self.compute_capability:.1f}".split(".")
        return f"sm_{major}{minor}"

    def clocks_supported(self, clocks: AppClocks) -> bool:
        span = self.supported_clocks.get(clocks.memory)
        return span is not None and span[0] <= clocks.graphics <= span[1]

    def describe_clocks(self) -> str:
        return ", ".join(f"memory {m} MHz with graphics {lo}-{hi} MHz" for m, (lo, hi) in
                         sorted(self.supported_clocks.items()))


def driver_branch(version: str) -> int:
    return int(version.split(".", 1)[0])


def profile_of(settings: Settings) -> GpuProfile | None:
    if settings.gpu_profile is None:
        return None
    return settings.gpu_profiles[settings.gpu_profile]


def app_clocks(settings: Settings) -> AppClocks | None:
    """The clocks to apply: `gpu_app_clocks`, or the profile's when that is None."""
    profile = profile_of(settings)
    if profile is None:
        return None
    return settings.gpu_app_clocks or profile.app_clocks


def _last_vllm_for(cc: float) -> str | None:
    fits = [row.last for row in compat.VLLM_RELEASES if row.min_compute_capability <= cc]
    return max(fits, key=compat.version_tuple) if fits else None


def guardrails(settings: Settings) -> list[str]:
    """Every combination the host's GPUs cannot run, each as `setting = value: why (fix: ...)`."""
    problems: list[str] = []

    def bad(setting: str, value, why: str, fix: str) -> None:
        problems.append(f"{setting} = {value!r}: {why} (fix: {fix})")

    if settings.gpu_profile is not None and settings.gpu_profile not in settings.gpu_profiles:
        bad("gpu_profile", settings.gpu_profile, "no such profile in gpu_profiles",
            f"one of {', '.join(sorted(settings.gpu_profiles))}, or add the profile to gpu_profiles")
        return problems
    profile = profile_of(settings)
    if profile is None:
        return problems  # a host without GPUs: nothing GPU-specific to check
    gpu = f"{profile.model_name} (compute capability {profile.compute_capability:.1f}, profile {settings.gpu_profile})"
    cc = profile.compute_capability

    # driver
    branch = driver_branch(settings.nvidia_driver_version)
    if profile.driver_branch_max is not None and branch > profile.driver_branch_max:
        bad("nvidia_driver_version", settings.nvidia_driver_version,
            f"driver branch R{branch} does not support {gpu}: R{profile.driver_branch_max} is its last branch",
            f"a {profile.driver_branch_max}.x version")
    if branch < profile.driver_branch_min:
        bad("nvidia_driver_version", settings.nvidia_driver_version,
            f"driver branch R{branch} is older than {gpu} needs (R{profile.driver_branch_min} or newer)",
            f"a version of branch {profile.driver_branch_min} or newer")
    if settings.nvidia_driver_flavour not in profile.driver_flavours:
        bad("nvidia_driver_flavour", settings.nvidia_driver_flavour,
            f"{gpu} cannot use the {settings.nvidia_driver_flavour} kernel modules "
            "(NVIDIA's open modules support Turing and newer only)",
            f"nvidia_driver_flavour = {profile.driver_flavours[0]!r}")

    # CUDA
    cuda_major = compat.version_tuple(settings.cuda_toolkit_version)[0]
    if profile.cuda_max_major is not None and cuda_major > profile.cuda_max_major:
        bad("cuda_toolkit_version", settings.cuda_toolkit_version,
            f"CUDA {cuda_major} cannot build for {gpu}: its last CUDA is {profile.cuda_max_major}.x "
            "(CUDA 13 dropped Maxwell, Pascal and Volta)",
            f"a {profile.cuda_max_major}.x toolkit, e.g. '{profile.cuda_max_major}.9'")
    need = compat.CUDA_MIN_DRIVER_BRANCH.get(cuda_major)
    if need is not None and branch < need:
        bad("cuda_toolkit_version", settings.cuda_toolkit_version,
            f"CUDA {cuda_major} needs driver branch R{need} or newer, nvidia_driver_version is R{branch}",
            f"an older toolkit, or driver branch {need}+")

    # clocks
    clocks = app_clocks(settings)
    if not profile.clocks_supported(clocks):
        source = "gpu_app_clocks" if settings.gpu_app_clocks else f"gpu_profiles.{settings.gpu_profile}.app_clocks"
        swapped = AppClocks(memory=clocks.graphics, graphics=clocks.memory)
        if profile.clocks_supported(swapped):
            hint = " The values look swapped: nvidia-smi -ac takes MEMORY,GRAPHICS."
        elif clocks.memory not in profile.supported_clocks:
            hint = (f" The memory clock comes first (nvidia-smi -ac MEMORY,GRAPHICS), and this GPU's memory runs at "
                    f"{' or '.join(str(m) for m in sorted(profile.supported_clocks))} MHz only.")
        else:
            hint = ""
        best_mem = max(profile.supported_clocks)
        bad(source, clocks.model_dump(),
            f"not a supported application clock pair of {profile.model_name} ({profile.describe_clocks()}).{hint}",
            f"e.g. {{'memory': {best_mem}, 'graphics': {profile.supported_clocks[best_mem][1]}}}, "
            "from `nvidia-smi -q -d SUPPORTED_CLOCKS`")

    # vLLM and PyTorch, from the service's flags (llmfleet/vllm.py) and model
    from llmfleet.vllm import flags

    f = flags(settings)
    dtype, quantization = f.get("dtype", "auto"), f.get("quantization")
    kv_cache_dtype, tp = str(f.get("kv-cache-dtype", "auto")), f.get("tensor-parallel-size", 1)
    model = settings.vllm_model
    release = compat.vllm_release(settings.vllm_version)
    if release is None:
        bad("vllm_version", settings.vllm_version,
            f"not in llmfleet's compatibility table (it knows {compat.known_vllm_range()})",
            "a known version, or add a row to VLLM_RELEASES in llmfleet/compat.py with its source")
    elif release.min_compute_capability > cc:
        last = _last_vllm_for(cc)
        bad("vllm_version", settings.vllm_version,
            f"vLLM {settings.vllm_version} has no kernels for {gpu}: its wheels start at compute capability "
            f"{release.min_compute_capability:.1f} ({release.source})",
            f"vllm_version = {last!r}, the last release with {profile.arch} kernels" if last else "another GPU")
    torch = settings.vllm_torch_version or (release.torch if release else None)
    if torch is not None and cc < 7.5:
        row = compat.torch_release(torch)
        if row is not None and not row.has_sm70:
            bad("vllm_torch_version" if settings.vllm_torch_version else "vllm_version",
                settings.vllm_torch_version or settings.vllm_version,
                f"PyTorch {torch} has no {profile.arch} kernels ({row.source})",
                "PyTorch 2.10 or older (vllm_torch_version), with a vLLM release that allows it")
    if cc < compat.BF16_MIN_CC:
        if dtype == "bfloat16":
            bad("vllm_flags.dtype", dtype,
                f"bfloat16 needs compute capability {compat.BF16_MIN_CC:.1f}, which {gpu} lacks "
                "(vLLM: 'Bfloat16 is only supported on GPUs with compute capability of at least 8.0')",
                "vllm_flags.dtype = 'half'")
        elif dtype == "auto" and model is not None and model.torch_dtype == "bfloat16":
            bad("vllm_flags.dtype", dtype,
                f"'auto' takes the checkpoint's dtype (vllm_model.torch_dtype = 'bfloat16'), which {gpu} cannot run",
                "vllm_flags.dtype = 'half'")
    if quantization is not None:
        need_cc = compat.QUANTIZATION_MIN_CC.get(quantization)
        if need_cc is None:
            bad("vllm_flags.quantization", quantization,
                f"not in llmfleet's table (it knows {', '.join(sorted(compat.QUANTIZATION_MIN_CC))})",
                "a known method, or add it to QUANTIZATION_MIN_CC in llmfleet/compat.py with its source")
        elif need_cc > cc:
            ok = sorted(m for m, c in compat.QUANTIZATION_MIN_CC.items() if c <= cc)
            bad("vllm_flags.quantization", quantization,
                f"its kernels need compute capability {need_cc:.1f}, which {gpu} lacks",
                f"a checkpoint quantized with {' or '.join(ok) or 'no method'}, or none")
    if kv_cache_dtype.startswith("fp8") and cc < 8.0 and release is not None \
            and not release.kv_cache_fp8_on_volta:
        bad("vllm_flags.kv-cache-dtype", kv_cache_dtype,
            f"vLLM {settings.vllm_version} runs the {release.volta_engine} engine on {gpu}, whose attention "
            "cannot use an fp8 KV cache there (only the V0 engine of vLLM <= 0.10.1 could)",
            "vllm_flags.kv-cache-dtype = 'auto'")

    # tensor parallelism
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        bad("vllm_flags.tensor-parallel-size", tp, "not a positive whole number", "e.g. 8")
        return problems
    if tp > profile.count:
        bad("vllm_flags.tensor-parallel-size", tp, f"more than the {profile.count} GPUs of profile "
            f"{settings.gpu_profile}", f"at most {profile.count}")
    if model is not None and model.num_attention_heads % tp:
        fits = [n for n in range(1, profile.count + 1) if model.num_attention_heads % n == 0]
        bad("vllm_flags.tensor-parallel-size", tp,
            f"does not divide the model's {model.num_attention_heads} attention heads "
            "(vllm_model.num_attention_heads)", f"one of {fits}")
    return problems
