"""Image corruptions at five severities, in numpy / torch (no image library).

Images are float (N, C, H, W) in [0, 1]; every corruption returns the same shape, clipped to
[0, 1]. Noise, blur and contrast follow Hendrycks & Dietterich (2019) with their CIFAR-10-C
constants (``make_cifar_c.py``), applied at the images' own resolution; rotation follows the
rotated-MNIST benchmark of the subnetwork-inference paper (Daxberger et al. 2021, after Ovadia
et al. 2019), which rotates test digits by 0..180 degrees: severity s turns the images 36·s
degrees counter-clockwise (36 .. 180, the same range in five even steps), bilinear, zero fill.
Random corruptions draw from ``numpy.random.default_rng([seed, corruption, severity])``, so a
(seed, corruption, severity) always gives the same images.
"""

from __future__ import annotations

import math

import numpy as np

from pipeline.core.errors import ConfigError

CORRUPTIONS = ("gaussian_noise", "shot_noise", "defocus_blur", "contrast", "rotation")  # implemented corruptions
SEVERITIES = (1, 2, 3, 4, 5)  # severity levels
GAUSSIAN_NOISE = (0.04, 0.06, 0.08, 0.09, 0.10)  # additive noise stddev per severity (CIFAR-10-C)
SHOT_NOISE = (500.0, 250.0, 100.0, 75.0, 50.0)  # Poisson rate per unit intensity (CIFAR-10-C)
DEFOCUS_BLUR = ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1.0, 0.2), (1.5, 0.1))  # (disk radius px, alias σ), CIFAR-10-C
CONTRAST = (0.75, 0.5, 0.4, 0.3, 0.15)  # factor on the deviation from each channel's mean (CIFAR-10-C)
ROTATION = (36.0, 72.0, 108.0, 144.0, 180.0)  # degrees counter-clockwise (rotated-MNIST range 0..180)


def corrupt(images: np.ndarray, corruption: str, severity: int, seed: int = 0) -> np.ndarray:
    """``images`` (N, C, H, W) in [0, 1] under ``corruption`` at ``severity`` (1..5), float32."""
    if corruption not in CORRUPTIONS:
        raise ConfigError(f"unknown corruption {corruption!r}; choose from {list(CORRUPTIONS)}")
    if severity not in SEVERITIES:
        raise ConfigError(f"severity must be one of {list(SEVERITIES)}, got {severity}")
    x = np.asarray(images, dtype=np.float32)
    if x.ndim != 4:
        raise ValueError(f"images must be (N, C, H, W), got shape {x.shape}")
    i = severity - 1
    rng = np.random.default_rng([seed, CORRUPTIONS.index(corruption), severity])
    if corruption == "gaussian_noise":
        return gaussian_noise(x, GAUSSIAN_NOISE[i], rng)
    if corruption == "shot_noise":
        return shot_noise(x, SHOT_NOISE[i], rng)
    if corruption == "defocus_blur":
        return defocus_blur(x, *DEFOCUS_BLUR[i])
    if corruption == "contrast":
        return contrast(x, CONTRAST[i])
    return rotate(x, ROTATION[i])


def gaussian_noise(x: np.ndarray, stddev: float, rng: np.random.Generator) -> np.ndarray:
    """x + N(0, stddev²) per pixel, clipped."""
    return np.clip(x + rng.normal(0.0, stddev, size=x.shape), 0.0, 1.0).astype(np.float32)


def shot_noise(x: np.ndarray, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Poisson(rate·x) / rate per pixel (photon noise), clipped."""
    return np.clip(rng.poisson(np.clip(x, 0.0, 1.0) * rate) / rate, 0.0, 1.0).astype(np.float32)


def contrast(x: np.ndarray, factor: float) -> np.ndarray:
    """Deviations from each image's per-channel mean scaled by ``factor``, clipped."""
    mean = x.mean(axis=(2, 3), keepdims=True)  # (N, C, 1, 1)
    return np.clip((x - mean) * factor + mean, 0.0, 1.0).astype(np.float32)


def disk_kernel(radius: float, alias_blur: float) -> np.ndarray:
    """Normalised disk of ``radius`` px smoothed by a 3x3 Gaussian of σ ``alias_blur``, (2h+1, 2h+1).

    As Hendrycks & Dietterich's ``disk`` for radius <= 8, on the smallest grid that holds the disk
    and the smoothing (half-width h = ceil(radius) + 1; their 17x17 grid adds only zeros).
    """
    h = math.ceil(radius) + 1
    ax = np.arange(-h, h + 1, dtype=np.float64)
    disk = ((ax[:, None] ** 2 + ax[None, :] ** 2) <= radius ** 2).astype(np.float64)  # (2h+1, 2h+1)
    disk /= disk.sum()
    g = np.exp(-np.arange(-1.0, 2.0) ** 2 / (2.0 * alias_blur ** 2))
    g /= g.sum()  # (3,) separable Gaussian taps
    padded = np.pad(disk, 1)  # zero margin: the disk sits at least 1 px inside the grid
    rows = sum(g[j] * padded[j:j + 2 * h + 1, :] for j in range(3))  # vertical pass (2h+1, 2h+3)
    return sum(g[j] * rows[:, j:j + 2 * h + 1] for j in range(3))  # horizontal pass (2h+1, 2h+1)


def defocus_blur(x: np.ndarray, radius: float, alias_blur: float) -> np.ndarray:
    """Each channel convolved with ``disk_kernel`` (reflected borders, as cv2.filter2D), clipped."""
    import torch
    from torch.nn import functional as F

    kernel = disk_kernel(radius, alias_blur)
    h = kernel.shape[0] // 2
    n, c, height, width = x.shape
    if h >= min(height, width):
        raise ConfigError(f"defocus_blur: radius {radius} needs images larger than {h}x{h}, got {height}x{width}")
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).reshape(n * c, 1, height, width)  # (N·C, 1, H, W)
    k = torch.from_numpy(kernel.astype(np.float32)).view(1, 1, *kernel.shape)  # (1, 1, 2h+1, 2h+1), symmetric
    y = F.conv2d(F.pad(t, (h, h, h, h), mode="reflect"), k)  # (N·C, 1, H, W)
    return y.reshape(n, c, height, width).clamp_(0.0, 1.0).numpy()


def rotate(x: np.ndarray, degrees: float) -> np.ndarray:
    """Images turned ``degrees`` counter-clockwise about their centre (bilinear, zero fill).

    A multiple of 90 degrees on a square image moves pixel centres onto pixel centres, so it equals
    ``np.rot90`` (tested).
    """
    import torch
    from torch.nn import functional as F

    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))  # (N, C, H, W)
    a = math.radians(degrees)
    cos, sin = math.cos(a), math.sin(a)
    h, w = t.shape[2], t.shape[3]
    # output (u, v) samples input R(-a)(u, v) in pixel units; normalised coords scale x by w/2, y by h/2,
    # and y points down, so a counter-clockwise turn on screen is a clockwise one in (x, y)
    theta = torch.tensor([[cos, -sin * h / w, 0.0], [sin * w / h, cos, 0.0]], dtype=torch.float32)
    grid = F.affine_grid(theta.expand(t.shape[0], 2, 3), list(t.shape), align_corners=False)  # (N, H, W, 2)
    y = F.grid_sample(t, grid, mode="bilinear", padding_mode="zeros", align_corners=False)  # (N, C, H, W)
    return y.clamp_(0.0, 1.0).numpy()
