"""Image data: CIFAR python batches and CIFAR-10-C .npy readers on tiny files, their errors, the
digits split, and the corruptions."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from pipeline.data.images.corruptions import (
    CONTRAST,
    CORRUPTIONS,
    GAUSSIAN_NOISE,
    SEVERITIES,
    SHOT_NOISE,
    corrupt,
    disk_kernel,
    rotate,
)
from pipeline.data.images.data import VisionDataError, cifar_splits, digits_splits, read_cifar, read_cifar_c


def cifar_rows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(n, 3072), dtype=np.uint8)


def write_batch(path, obj) -> None:
    with open(path, "wb") as fh:
        pickle.dump(obj, fh, protocol=2)


@pytest.fixture
def cifar10_dir(tmp_path):
    """CIFAR-10 python layout with 2 images per batch file (labels = file index, image index)."""
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    for i, name in enumerate([f"data_batch_{j}" for j in range(1, 6)] + ["test_batch"]):
        write_batch(root / name, {b"batch_label": name.encode(), b"labels": [i % 10, (i + 3) % 10],
                                  b"data": cifar_rows(2, i), b"filenames": [b"a.png", b"b.png"]})
    write_batch(root / "batches.meta", {b"label_names": [f"c{i}".encode() for i in range(10)]})
    return root


@pytest.fixture
def cifar100_dir(tmp_path):
    root = tmp_path / "cifar-100-python"
    root.mkdir()
    for i, name in enumerate(["train", "test"]):
        write_batch(root / name, {b"fine_labels": [99, 7 + i, 0], b"coarse_labels": [19, 3, 0],
                                  b"data": cifar_rows(3, 10 + i)})
    return root


# ---------------------------------------------------------------- CIFAR readers


def test_cifar10_reader_layout(cifar10_dir):
    train = read_cifar(cifar10_dir, "cifar10", "train")
    assert train.images.shape == (10, 3, 32, 32) and train.images.dtype == np.uint8
    assert train.labels.tolist() == [0, 3, 1, 4, 2, 5, 3, 6, 4, 7] and train.num_classes == 10
    rows = cifar_rows(2, 2)  # data_batch_3
    img = train.images[4]
    assert np.array_equal(img[0].ravel(), rows[0, :1024])  # red plane first, row-major
    assert np.array_equal(img[1, 0, :], rows[0, 1024:1056])  # green, top row
    assert np.array_equal(img[2, 31, 31], rows[0, 3071])  # blue, bottom-right pixel last
    test = read_cifar(cifar10_dir, "cifar10", "test")
    assert len(test) == 2 and test.labels.tolist() == [5, 8]
    x = test.floats()
    assert x.dtype == np.float32 and np.isclose(x.max(), test.images.max() / 255.0)


def test_cifar100_reader_fine_and_coarse(cifar100_dir):
    fine = read_cifar(cifar100_dir, "cifar100", "train")
    assert fine.num_classes == 100 and fine.labels.tolist() == [99, 7, 0]
    coarse = read_cifar(cifar100_dir, "cifar100", "test", label_mode="coarse")
    assert coarse.num_classes == 20 and coarse.labels.tolist() == [19, 3, 0]
    assert fine.images.shape == (3, 3, 32, 32)


def test_cifar_splits_hold_out_validation_by_seed(cifar10_dir):
    s = cifar_splits(cifar10_dir, "cifar10", val_fraction=0.3, seed=1)
    assert (len(s.train), len(s.val), len(s.test)) == (7, 3, 2)
    again = cifar_splits(cifar10_dir, "cifar10", val_fraction=0.3, seed=1)
    assert np.array_equal(s.val.images, again.val.images)
    whole = cifar_splits(cifar10_dir, "cifar10")
    assert len(whole.train) == 10 and whole.val is whole.test


@pytest.mark.parametrize("content, match", [
    (b"not a pickle at all", "not a CIFAR python batch"),
    (pickle.dumps([1, 2, 3], protocol=2), "expected a dict"),
    (pickle.dumps({b"labels": [1]}, protocol=2), "no 'data' entry"),
    (pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [1, 2]}, protocol=2), "must be \\(n, 3072\\)"),
    (pickle.dumps({b"data": np.zeros((2, 3072), np.float32), b"labels": [1, 2]}, protocol=2), "uint8"),
    (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]}, protocol=2), "1 labels for 2 images"),
    (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1, 10]}, protocol=2), "outside \\[0, 10\\)"),
    (pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": ["x"]}, protocol=2), "not a list of integers"),
])
def test_cifar_malformed_batch_names_the_file(cifar10_dir, content, match):
    (cifar10_dir / "data_batch_3").write_bytes(content)
    with pytest.raises(VisionDataError, match=match) as err:
        read_cifar(cifar10_dir, "cifar10", "train")
    assert str(cifar10_dir / "data_batch_3") in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, ValueError)


def test_cifar_missing_file_and_directory(cifar10_dir, tmp_path):
    (cifar10_dir / "data_batch_5").unlink()
    with pytest.raises(VisionDataError, match="data_batch_5: not found"):
        read_cifar(cifar10_dir, "cifar10", "train")
    read_cifar(cifar10_dir, "cifar10", "test")  # the test split does not need it
    with pytest.raises(VisionDataError, match="not a directory"):
        read_cifar(tmp_path / "nowhere", "cifar10", "test")
    with pytest.raises(ValueError, match="split"):
        read_cifar(cifar10_dir, "cifar10", "val")


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_cifar_reader_refuses_code_in_pickles(cifar10_dir):
    write_batch(cifar10_dir / "test_batch", {b"data": _Evil(), b"labels": []})
    with pytest.raises(VisionDataError, match="refusing to load global (__builtin__|builtins).print"):
        read_cifar(cifar10_dir, "cifar10", "test")


@pytest.fixture
def cifar10c_dir(tmp_path):
    """CIFAR-10-C layout: 5 severities x 3 images (pixel value = 10·severity + image)."""
    root = tmp_path / "CIFAR-10-C"
    root.mkdir()
    x = np.zeros((15, 32, 32, 3), np.uint8)
    for s in range(5):
        for i in range(3):
            x[3 * s + i] = 10 * (s + 1) + i
    x[:, 0, 0, 1] = 200  # green channel of the top-left pixel
    np.save(root / "gaussian_noise.npy", x)
    np.save(root / "labels.npy", np.tile(np.array([4, 2, 9], np.uint8), 5))
    return root


def test_cifar10c_reader_slices_severities(cifar10c_dir):
    for s in SEVERITIES:
        d = read_cifar_c(cifar10c_dir, "gaussian_noise", s)
        assert d.images.shape == (3, 3, 32, 32) and d.labels.tolist() == [4, 2, 9]
        assert d.images[1, 0, 5, 5] == 10 * s + 1
        assert d.images[0, 1, 0, 0] == 200 and d.images[0, 0, 0, 0] == 10 * s  # channels moved first


@pytest.mark.parametrize("broken, match", [
    ("missing", "gaussian_noise.npy: not found"),
    ("garbage", "gaussian_noise.npy: not a .npy array"),
    ("shape", "expected \\(5·n, H, W, 3\\) uint8"),
    ("count", "do not split into 5 severities"),
    ("labels", "labels.npy: malformed CIFAR-C labels"),
    ("label_range", "outside \\[0, 10\\)"),
])
def test_cifar10c_errors_name_the_file(cifar10c_dir, broken, match):
    path = cifar10c_dir / "gaussian_noise.npy"
    if broken == "missing":
        path.unlink()
    elif broken == "garbage":
        path.write_bytes(b"\x93NUMPY garbage")
    elif broken == "shape":
        np.save(path, np.zeros((15, 32, 32), np.uint8))
    elif broken == "count":
        np.save(path, np.zeros((14, 32, 32, 3), np.uint8))
    elif broken == "labels":
        np.save(cifar10c_dir / "labels.npy", np.zeros(7, np.uint8))
    else:
        np.save(cifar10c_dir / "labels.npy", np.full(15, 10, np.int64))
    with pytest.raises(VisionDataError, match=match) as err:
        read_cifar_c(cifar10c_dir, "gaussian_noise", 2)
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------- digits


def test_digits_split_is_stratified_and_fixed_by_seed():
    a, b, c = digits_splits(0), digits_splits(0), digits_splits(1)
    assert (len(a.train), len(a.val), len(a.test)) == (1078, 360, 359)
    assert a.train.images.shape == (1078, 1, 16, 16) and a.train.images.dtype == np.float32
    assert 0.0 <= a.train.images.min() and a.train.images.max() <= 1.0
    for part in ("train", "val", "test"):
        assert np.array_equal(getattr(a, part).images, getattr(b, part).images)
        assert np.array_equal(getattr(a, part).labels, getattr(b, part).labels)
    assert not np.array_equal(a.test.labels, c.test.labels) or not np.array_equal(a.test.images, c.test.images)
    counts = np.bincount(a.test.labels, minlength=10)
    assert counts.min() >= 34 and counts.max() <= 37  # 20% of 174..183 per class
    native = digits_splits(0, size=8)
    from sklearn.datasets import load_digits

    everything = np.concatenate([native.train.images, native.val.images, native.test.images])[:, 0] * 16.0
    assert len(everything) == 1797
    keys = {im.tobytes() for im in load_digits().images.astype(np.float32)}
    assert {im.tobytes() for im in everything.astype(np.float32)} <= keys  # disjoint parts cover the data set
    with pytest.raises(ValueError, match="fractions"):
        digits_splits(0, fractions=(0.5, 0.5, 0.5))


# ---------------------------------------------------------------- corruptions


@pytest.fixture(scope="module")
def digits_test():
    return digits_splits(0).test.images[:64]


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_corruptions_keep_shape_range_and_are_seeded(name, digits_test):
    changes = []
    for s in SEVERITIES:
        y = corrupt(digits_test, name, s, seed=3)
        assert y.shape == digits_test.shape and y.dtype == np.float32
        assert y.min() >= 0.0 and y.max() <= 1.0
        assert np.array_equal(y, corrupt(digits_test, name, s, seed=3))
        changes.append(float(np.abs(y - digits_test).mean()))
    assert changes[0] > 0
    if name != "rotation":  # rotation by 144 and 180 degrees is not "more" change per pixel than by 108
        assert all(a < b for a, b in zip(changes, changes[1:])), changes
    if name in ("gaussian_noise", "shot_noise"):
        assert not np.array_equal(corrupt(digits_test, name, 3, seed=3), corrupt(digits_test, name, 3, seed=4))


def test_noise_and_contrast_constants():
    gray = np.full((20, 1, 16, 16), 0.5, np.float32)
    for s in SEVERITIES:
        g = corrupt(gray, "gaussian_noise", s)
        assert abs(g.std() - GAUSSIAN_NOISE[s - 1]) < 0.1 * GAUSSIAN_NOISE[s - 1]
        shot = corrupt(gray, "shot_noise", s)
        assert abs(shot.mean() - 0.5) < 0.01
        assert abs(shot.var() - 0.5 / SHOT_NOISE[s - 1]) < 0.15 * 0.5 / SHOT_NOISE[s - 1]
    x = np.random.default_rng(0).random((3, 2, 8, 8)).astype(np.float32) * 0.5 + 0.25
    m = x.mean(axis=(2, 3), keepdims=True)
    assert np.allclose(corrupt(x, "contrast", 4), (x - m) * CONTRAST[3] + m, atol=1e-6)


def test_rotation_turns_counter_clockwise_and_composes():
    x = np.random.default_rng(0).random((2, 1, 12, 12)).astype(np.float32)
    assert np.allclose(rotate(x, 90.0), np.rot90(x, 1, axes=(2, 3)), atol=1e-5)  # counter-clockwise on screen
    assert np.allclose(rotate(x, 180.0), np.rot90(x, 2, axes=(2, 3)), atol=1e-5)
    assert np.allclose(corrupt(x, "rotation", 5), np.rot90(x, 2, axes=(2, 3)), atol=1e-5)  # severity 5: 180°
    dot = np.zeros((1, 1, 16, 16), np.float32)
    dot[0, 0, 2, 8] = 1.0  # above the centre
    turned = rotate(dot, 36.0)[0, 0]
    r, c = np.unravel_index(turned.argmax(), turned.shape)
    assert c < 8 and r < 7.5  # moved left: counter-clockwise


def test_defocus_kernel_is_a_normalised_symmetric_disk():
    for radius, blur in [(0.3, 0.4), (1.0, 0.2), (1.5, 0.1)]:
        k = disk_kernel(radius, blur)
        assert np.isclose(k.sum(), 1.0) and np.allclose(k, k.T) and np.allclose(k, k[::-1])
    assert np.allclose(disk_kernel(1.5, 1e-3)[2:5, 2:5], 1.0 / 9.0)  # radius 1.5: the 3x3 block
    flat = np.full((1, 1, 16, 16), 0.3, np.float32)
    assert np.allclose(corrupt(flat, "defocus_blur", 5), 0.3, atol=1e-6)  # blur keeps a constant image


def test_corrupt_rejects_unknown_names_and_severities(digits_test):
    with pytest.raises(ValueError, match="unknown corruption 'fog'"):
        corrupt(digits_test, "fog", 1)
    with pytest.raises(ValueError, match="severity"):
        corrupt(digits_test, "contrast", 6)
