"""Image augmentation that really augments, on batches, on any device: kornia's, configured in one place.

>>> from ascendify.workloads import augment as data_aug
>>> aug = data_aug.build_augment(image_size=224)          # doctest: +SKIP
>>> out = aug(images_on_device)                            # [B, 3, H, W] float in [0, 1] -> [B, 3, 224, 224]

Why a library and not hand-written code: the tutorials users copy ship an "NPU rotation" and a "colour jitter"
that return the images unchanged. kornia (pinned in ``constraints.txt``) implements each transform as batched
tensor ops, so the same pipeline runs per sample in DataLoader workers on the CPU or per batch on the
accelerator (CUDA, a real NPU, the emulated NPU), with a different random draw for every image.

The default training pipeline, in order (each step can be switched off by passing ``None`` / ``False``):

=================  ==============================================  =========================================
step               kornia                                          default
=================  ==============================================  =========================================
random crop        ``RandomResizedCrop(size, scale)``              scale (0.08, 1.0), always
horizontal flip    ``RandomHorizontalFlip``                        p = 0.5
rotation           ``RandomRotation(degrees)``                     +-15 degrees, p = 0.5
colour jitter      ``ColorJitter(b, c, s, h)``                     0.4, 0.4, 0.4, 0.1, p = 0.8
blur               ``RandomGaussianBlur(kernel, sigma)``           kernel 5, sigma (0.1, 2.0), p = 0.2
normalise          ``Normalize(mean, std)``                        ImageNet mean/std, always
=================  ==============================================  =========================================

:func:`build_eval` is the evaluation counterpart (resize + normalise, nothing random). Inputs are float
images in [0, 1], shape ``[B, 3, H, W]`` (``[3, H, W]`` is taken as a batch of one).
"""

from __future__ import annotations

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

STEPS = ("crop", "flip", "rotation", "color_jitter", "blur", "normalize")


def build_augment(
    image_size: int | tuple[int, int] = 224,
    *,
    crop_scale: tuple[float, float] | None = (0.08, 1.0),
    flip_p: float | None = 0.5,
    rotation_degrees: float | None = 15.0,
    rotation_p: float = 0.5,
    color_jitter: tuple[float, float, float, float] | None = (0.4, 0.4, 0.4, 0.1),
    color_jitter_p: float = 0.8,
    blur_kernel: int | None = 5,
    blur_sigma: tuple[float, float] = (0.1, 2.0),
    blur_p: float = 0.2,
    mean: tuple[float, ...] | None = IMAGENET_MEAN,
    std: tuple[float, ...] | None = IMAGENET_STD,
    only: str | None = None,
    p: float | None = None,
):
    """The training augmentation as one ``nn.Module`` (kornia ``AugmentationSequential``).

    ``only="rotation"`` (one of :data:`STEPS`) keeps a single step, and ``p`` overrides every step's
    probability (``p=1.0`` in tests, to see each transform act). Without a crop the output keeps the input's
    size. Move the module with ``.to(device)`` like any other (it holds the normalisation constants).
    """
    import kornia.augmentation as K
    import torch

    size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    if only is not None and only not in STEPS:
        raise ValueError(f"augmentation step {only!r}: expected one of {', '.join(STEPS)}")

    def want(step: str) -> bool:
        return only is None or only == step

    def prob(default: float) -> float:
        return default if p is None else p

    steps = []
    if crop_scale is not None and want("crop"):
        steps.append(K.RandomResizedCrop(size, scale=crop_scale, p=1.0 if p is None else p))
    if flip_p is not None and want("flip"):
        steps.append(K.RandomHorizontalFlip(p=prob(flip_p)))
    if rotation_degrees is not None and want("rotation"):
        steps.append(K.RandomRotation(rotation_degrees, p=prob(rotation_p)))
    if color_jitter is not None and want("color_jitter"):
        b, c, s, h = color_jitter
        steps.append(K.ColorJitter(b, c, s, h, p=prob(color_jitter_p)))
    if blur_kernel is not None and want("blur"):
        steps.append(K.RandomGaussianBlur((blur_kernel, blur_kernel), blur_sigma, p=prob(blur_p)))
    if mean is not None and std is not None and want("normalize"):
        steps.append(K.Normalize(mean=torch.tensor(mean), std=torch.tensor(std)))
    if not steps:
        raise ValueError("every augmentation step is switched off")
    return K.AugmentationSequential(*steps, data_keys=["input"])


def build_eval(image_size: int | tuple[int, int] = 224, *, mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """Evaluation preprocessing: resize to ``image_size`` and normalise (deterministic)."""
    import kornia.augmentation as K
    import torch

    size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    return K.AugmentationSequential(
        K.Resize(size), K.Normalize(mean=torch.tensor(mean), std=torch.tensor(std)), data_keys=["input"]
    )
