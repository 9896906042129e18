"""The GPU compatibility guardrails, and what a host's GPU profile says.

A profile (group data `gpu_profiles`, chosen per host by `gpu_profile`; its type is
`llmfleet.schema.GpuProfile`) says what a host's GPUs must look like. `guardrails(settings)` checks
the driver, CUDA, clocks and the vLLM service settings against the profile and `llmfleet.compat`'s
table, one topic per function; it runs with the settings validation (`llmfleet.settings.validate`),
in pyinfra's prepare phase, so a host is never touched with a combination its GPUs cannot run.
"""

from __future__ import annotations

from packaging.version import Version

from llmfleet import compat
from llmfleet.schema import AppClocks, GpuProfile, Settings
from llmfleet.vllm import flags


def driver_branch(version: str) -> int:
    return int(version.split(".", 1)[0])


def app_clocks(settings: Settings) -> AppClocks | None:
    """The clocks to apply: `gpu_app_clocks`, or the profile's when that is None."""
    profile = settings.profile
    if profile is None:
        return None
    if profile.app_clocks is None:
        return None  # a GPU without application clocks (the guardrails refuse gpu_app_clocks for it)
    return settings.gpu_app_clocks or profile.app_clocks


def _bad(setting: str, value: object, why: str, fix: str) -> str:
    return f"{setting} = {value!r}: {why} (fix: {fix})"


def _describe_gpu(settings: Settings, profile: GpuProfile) -> str:
    return f"{profile.model_name} (compute capability {profile.compute_capability:.1f}, profile {settings.gpu_profile})"


def _last_vllm_for(cc: float) -> str | None:
    fits = [row.last for row in compat.VLLM_RELEASES if row.min_compute_capability <= cc]
    return max(fits, key=Version) if fits else None


def driver_problems(settings: Settings, profile: GpuProfile) -> list[str]:
    """The driver branch and flavour the GPUs support."""
    problems = []
    gpu = _describe_gpu(settings, profile)
    branch = driver_branch(settings.nvidia_driver_version)
    if profile.driver_branch_max is not None and branch > profile.driver_branch_max:
        problems.append(_bad(
            "nvidia_driver_version", settings.nvidia_driver_version,
            f"driver branch R{branch} does not support {gpu}: R{profile.driver_branch_max} is its last branch",
            f"a {profile.driver_branch_max}.x version"))
    if branch < profile.driver_branch_min:
        problems.append(_bad(
            "nvidia_driver_version", settings.nvidia_driver_version,
            f"driver branch R{branch} is older than {gpu} needs (R{profile.driver_branch_min} or newer)",
            f"a version of branch {profile.driver_branch_min} or newer"))
    if settings.nvidia_driver_flavour not in profile.driver_flavours:
        gen = compat.generation(profile.compute_capability)
        why = {"unsupported": "NVIDIA's open modules support Turing and newer only",
               "required": f"{gen.name if gen else 'this generation'} runs the open modules only: NVIDIA does not "
                           "support the proprietary ones there"}.get(gen.open_modules if gen else "", "")
        problems.append(_bad(
            "nvidia_driver_flavour", settings.nvidia_driver_flavour,
            f"{gpu} cannot use the {settings.nvidia_driver_flavour} kernel modules" + (f" ({why})" if why else ""),
            f"nvidia_driver_flavour = {profile.driver_flavours[0]!r}"))
    elif settings.nvidia_driver_flavour == "open" and branch < compat.OPEN_MODULES_FIRST_BRANCH:
        problems.append(_bad(
            "nvidia_driver_version", settings.nvidia_driver_version,
            f"driver branch R{branch} has no open kernel modules: they start with R{compat.OPEN_MODULES_FIRST_BRANCH}",
            f"a version of branch {compat.OPEN_MODULES_FIRST_BRANCH} or newer, or nvidia_driver_flavour = "
            "'proprietary'"))
    return problems


def profile_problems(settings: Settings, profile: GpuProfile) -> list[str]:
    """A profile that claims what NVIDIA does not support for its GPU generation (compat.GENERATIONS):
    open kernel modules before Turing, proprietary ones on Blackwell, driver branches or CUDA past the
    generation's last. The shipped profiles agree with it; this guards the ones a fleet writes itself."""
    field = f"gpu_profiles.{settings.gpu_profile}"
    cc = profile.compute_capability
    gen = compat.generation(cc)
    if gen is None:
        return [_bad(f"{field}.compute_capability", cc, "not a compute capability of a GPU generation llmfleet's "
                     f"table knows ({', '.join(g.name for g in compat.GENERATIONS)})",
                     "the GPU's compute capability (developer.nvidia.com/cuda-gpus), or add its generation to "
                     "GENERATIONS in llmfleet/compat.py with its source")]
    problems = []
    if gen.open_modules == "unsupported" and "open" in profile.driver_flavours:
        problems.append(_bad(f"{field}.driver_flavours", profile.driver_flavours,
                             f"{gen.name} GPUs cannot run NVIDIA's open kernel modules ({gen.source})",
                             "['proprietary']"))
    if gen.open_modules == "required" and "proprietary" in profile.driver_flavours:
        problems.append(_bad(f"{field}.driver_flavours", profile.driver_flavours,
                             f"NVIDIA supports only the open kernel modules on {gen.name} ({gen.source})", "['open']"))
    if gen.driver_branch_last is not None and (profile.driver_branch_max is None
                                               or profile.driver_branch_max > gen.driver_branch_last):
        problems.append(_bad(f"{field}.driver_branch_max", profile.driver_branch_max,
                             f"R{gen.driver_branch_last} is the last driver branch for {gen.name} ({gen.source})",
                             str(gen.driver_branch_last)))
    if gen.cuda_major_last is not None and (profile.cuda_max_major is None
                                            or profile.cuda_max_major > gen.cuda_major_last):
        problems.append(_bad(f"{field}.cuda_max_major", profile.cuda_max_major,
                             f"CUDA {gen.cuda_major_last} is the last toolkit for {gen.name} ({gen.source})",
                             str(gen.cuda_major_last)))
    return problems


def cuda_problems(settings: Settings, profile: GpuProfile) -> list[str]:
    """The CUDA toolkit against the GPUs and the driver branch."""
    problems = []
    gpu = _describe_gpu(settings, profile)
    branch = driver_branch(settings.nvidia_driver_version)
    cuda_major = Version(settings.cuda_toolkit_version).major
    if profile.cuda_max_major is not None and cuda_major > profile.cuda_max_major:
        problems.append(_bad(
            "cuda_toolkit_version", settings.cuda_toolkit_version,
            f"CUDA {cuda_major} cannot build for {gpu}: its last CUDA is {profile.cuda_max_major}.x "
            "(CUDA 13 dropped Maxwell, Pascal and Volta)",
            f"a {profile.cuda_max_major}.x toolkit, e.g. '{profile.cuda_max_major}.9'"))
    need = compat.CUDA_MIN_DRIVER_BRANCH.get(cuda_major)
    if need is not None and branch < need:
        problems.append(_bad(
            "cuda_toolkit_version", settings.cuda_toolkit_version,
            f"CUDA {cuda_major} needs driver branch R{need} or newer, nvidia_driver_version is R{branch}",
            f"an older toolkit, or driver branch {need}+"))
    return problems


def clock_problems(settings: Settings, profile: GpuProfile) -> list[str]:
    """The application clocks against the pairs the GPU supports."""
    if profile.app_clocks is None:
        if settings.gpu_app_clocks is None:
            return []
        return [_bad("gpu_app_clocks", settings.gpu_app_clocks.model_dump(),
                     f"{profile.model_name} has no application clocks (profile {settings.gpu_profile}: app_clocks "
                     "None; GeForce boards refuse nvidia-smi -ac)", "gpu_app_clocks = None")]
    clocks = settings.gpu_app_clocks or profile.app_clocks
    if profile.clocks_supported(clocks):
        return []
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
    return [_bad(source, clocks.model_dump(),
                 f"not a supported application clock pair of {profile.model_name} ({profile.describe_clocks()}).{hint}",
                 f"e.g. {{'memory': {best_mem}, 'graphics': {profile.supported_clocks[best_mem][1]}}}, "
                 "from `nvidia-smi -q -d SUPPORTED_CLOCKS`")]


def release_problems(settings: Settings, profile: GpuProfile) -> list[str]:
    """The vLLM and PyTorch releases: kernels for the GPU's architecture."""
    problems = []
    gpu = _describe_gpu(settings, profile)
    cc = profile.compute_capability
    release = compat.vllm_release(settings.vllm_version)
    if release is None:
        problems.append(_bad(
            "vllm_version", settings.vllm_version,
            f"not in llmfleet's compatibility table (it knows {compat.known_vllm_range()})",
            "a known version, or add a row to VLLM_RELEASES in llmfleet/compat.py with its source"))
    elif release.min_compute_capability > cc:
        last = _last_vllm_for(cc)
        problems.append(_bad(
            "vllm_version", settings.vllm_version,
            f"vLLM {settings.vllm_version} has no kernels for {gpu}: its wheels start at compute capability "
            f"{release.min_compute_capability:.1f} ({release.source})",
            f"vllm_version = {last!r}, the last release with {profile.arch} kernels" if last else "another GPU"))
    torch = settings.vllm_torch_version or (release.torch if release else None)
    if torch is not None and cc < 7.5:
        row = compat.torch_release(torch)
        if row is not None and not row.has_sm70:
            problems.append(_bad(
                "vllm_torch_version" if settings.vllm_torch_version else "vllm_version",
                settings.vllm_torch_version or settings.vllm_version,
                f"PyTorch {torch} has no {profile.arch} kernels ({row.source})",
                "PyTorch 2.10 or older (vllm_torch_version), with a vLLM release that allows it"))
    return problems


def _quantization(settings: Settings) -> tuple[str | None, str]:
    """The quantization vLLM will run and the setting it comes from: vllm_flags.quantization, else the
    checkpoint's own (vllm_model.quantization), which vLLM reads from its config.json."""
    q = flags(settings).get("quantization")
    if q is not None:
        return str(q), "vllm_flags.quantization"
    if settings.vllm_model is not None and settings.vllm_model.quantization is not None:
        return settings.vllm_model.quantization, "vllm_model.quantization"
    return None, ""


def precision_problems(settings: Settings, profile: GpuProfile) -> list[str]:
    """The dtype, the quantization method and the KV-cache dtype the GPU's kernels can run, in the
    pinned vLLM (compat.QUANTIZATION_RULES, compat.ATTENTION_BACKENDS)."""
    problems = []
    gpu = _describe_gpu(settings, profile)
    cc = profile.compute_capability
    version = settings.vllm_version
    f = flags(settings)
    dtype = f.get("dtype", "auto")
    kv_cache_dtype = str(f.get("kv-cache-dtype", "auto"))
    model = settings.vllm_model
    if cc < compat.BF16_MIN_CC:
        if dtype == "bfloat16":
            problems.append(_bad(
                "vllm_flags.dtype", dtype,
                f"bfloat16 needs compute capability {compat.BF16_MIN_CC:.1f}, which {gpu} lacks "
                "(vLLM: 'Bfloat16 is only supported on GPUs with compute capability of at least 8.0')",
                "vllm_flags.dtype = 'half'"))
        elif dtype == "auto" and model is not None and model.torch_dtype == "bfloat16":
            problems.append(_bad(
                "vllm_flags.dtype", dtype,
                f"'auto' takes the checkpoint's dtype (vllm_model.torch_dtype = 'bfloat16'), which {gpu} cannot run",
                "vllm_flags.dtype = 'half'"))
    quantization, source = _quantization(settings)
    if quantization is not None:
        rule = compat.quantization_rule(quantization, version)
        ok = [m for m in compat.quantization_methods(version)
              if (r := compat.quantization_rule(m, version)) is not None and r.min_cc <= cc]
        if rule is None:
            problems.append(_bad(
                source, quantization,
                f"not in llmfleet's table for vLLM {version} "
                f"(it knows {', '.join(compat.quantization_methods(version))})",
                "a known method, or add a QuantizationRule to llmfleet/compat.py with its source"))
        elif rule.min_cc > cc:
            problems.append(_bad(
                source, quantization,
                f"its kernels need compute capability {rule.min_cc:.1f} in vLLM {version}, which {gpu} lacks "
                f"({rule.source})",
                f"a checkpoint quantized with {' or '.join(ok) or 'no method'}, or none"
                if source.startswith("vllm_model")
                else f"one of {', '.join(ok) or 'no method'}, or none (with a checkpoint made for it)"))
    if kv_cache_dtype.startswith("fp8"):
        runs, path = compat.fp8_kv_cache_path(version, cc, kv_cache_dtype)
        release = compat.vllm_release(version)
        if runs is False:
            works = [d for d in ("fp8", "fp8_e4m3", "fp8_e5m2") if compat.fp8_kv_cache_path(version, cc, d)[0]]
            problems.append(_bad(
                "vllm_flags.kv-cache-dtype", kv_cache_dtype, f"on {gpu}, {path}",
                f"vllm_flags.kv-cache-dtype = {works[0]!r}" if works else "vllm_flags.kv-cache-dtype = 'auto'"))
        elif runs is None and cc < 8.0 and release is not None and not release.kv_cache_fp8_on_volta:
            problems.append(_bad(
                "vllm_flags.kv-cache-dtype", kv_cache_dtype,
                f"vLLM {version} runs the {release.volta_engine} engine on {gpu}, whose attention "
                "cannot use an fp8 KV cache there (only the V0 engine of vLLM <= 0.10.1 could)",
                "vllm_flags.kv-cache-dtype = 'auto'"))
    return problems


def precision_paths(settings: Settings) -> list[str]:
    """Which path the host's quantization and KV cache take in the pinned vLLM on its GPUs, in words
    (`llmfleet layout` and the deploy print them). Empty without a GPU profile, or with neither."""
    profile = settings.profile
    if profile is None:
        return []
    gpu = _describe_gpu(settings, profile)
    cc, version = profile.compute_capability, settings.vllm_version
    paths = []
    quantization, source = _quantization(settings)
    if quantization is not None:
        rule = compat.quantization_rule(quantization, version)
        if rule is None:
            paths.append(f"quantization {quantization} ({source}): not in llmfleet's table for vLLM {version}")
        elif rule.min_cc > cc:
            paths.append(f"quantization {quantization} ({source}): refused on {gpu}")
        elif rule.native_cc is not None and cc < rule.native_cc:
            paths.append(f"quantization {quantization} ({source}): vLLM {version} on {gpu} runs {rule.fallback} "
                         f"(native from compute capability {rule.native_cc:.1f})")
        elif rule.native_cc is not None:
            paths.append(f"quantization {quantization} ({source}): vLLM {version} runs it natively on the FP8 tensor "
                         f"cores of {gpu} (W8A8: weights and activations in FP8)")
        else:
            paths.append(f"quantization {quantization} ({source}): vLLM {version} runs its own kernels on {gpu}")
    kv_cache_dtype = str(flags(settings).get("kv-cache-dtype", "auto"))
    if kv_cache_dtype.startswith("fp8"):
        runs, path = compat.fp8_kv_cache_path(version, cc, kv_cache_dtype)
        verdict = {True: "", False: "refused: ", None: ""}[runs]
        paths.append(f"kv-cache-dtype {kv_cache_dtype}: {verdict}{path}")
    return paths


def parallelism_problems(settings: Settings, profile: GpuProfile) -> list[str]:
    """Tensor parallelism against the profile's GPU count and the model's attention heads. A size that
    is not a positive whole number is the option check's (llmfleet/vllm.py). A serving layout
    sizes each instance itself: llmfleet/vllm_layout.py checks those."""
    if settings.vllm_layout is not None:
        return []
    tp = flags(settings).get("tensor-parallel-size", 1)
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        return []
    problems = []
    if tp > profile.count:
        problems.append(_bad("vllm_flags.tensor-parallel-size", tp, f"more than the {profile.count} GPUs of "
                             f"profile {settings.gpu_profile}", f"at most {profile.count}"))
    model = settings.vllm_model
    if model is not None and model.num_attention_heads % tp:
        fits = [n for n in range(1, profile.count + 1) if model.num_attention_heads % n == 0]
        problems.append(_bad(
            "vllm_flags.tensor-parallel-size", tp,
            f"does not divide the model's {model.num_attention_heads} attention heads "
            "(vllm_model.num_attention_heads)", f"one of {fits}"))
    return problems


# the topics, in the order their problems are reported
TOPICS = (profile_problems, driver_problems, cuda_problems, clock_problems, release_problems, precision_problems,
          parallelism_problems)


def guardrails(settings: Settings) -> list[str]:
    """Every combination the host's GPUs cannot run, each as `setting = value: why (fix: ...)`."""
    if settings.gpu_profile is not None and settings.gpu_profile not in settings.gpu_profiles:
        return [_bad("gpu_profile", settings.gpu_profile, "no such profile in gpu_profiles",
                     f"one of {', '.join(sorted(settings.gpu_profiles))}, or add the profile to gpu_profiles")]
    profile = settings.profile
    if profile is None:
        return []  # a host without GPUs: nothing GPU-specific to check
    return [problem for topic in TOPICS for problem in topic(settings, profile)]
