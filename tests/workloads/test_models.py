"""The offline model zoo (ascendify.workloads.models): real names build with the reference sizes, small configs run."""

import textwrap

import pytest

torch = pytest.importorskip("torch")

from ascendify.workloads import models  # noqa: E402


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("resnet50", 25_557_032),  # torchvision's count for the same architecture
        ("resnet18", 11_689_512),
        ("efficientnet_b0", 5_288_548),
        ("bert-large", 335_143_938),  # BERT-Large encoder + pooler + 2-way classifier
        ("gpt2", 124_439_808),  # GPT-2 small, lm_head tied to the embedding
    ],
)
def test_real_names_build_with_reference_sizes(name, params):
    m = models.build_model(name, device="meta")  # no memory: shapes only
    assert models.count_parameters(m) == params
    assert m.ascendify_task in models.TASKS


def test_aliases_and_unknown_names():
    assert models.canonical_name("ResNet-50") == "resnet50"
    assert models.info("GPT-2").name == "gpt2"
    with pytest.raises(models.ModelError, match="unknown model 'vgg16'.*resnet50"):
        models.build_model("vgg16")


@pytest.mark.parametrize(
    ("name", "overrides", "out_shape"),
    [
        ("resnet18", {"hidden_sizes": [8, 8, 8, 8], "embedding_size": 8}, (2, 5)),
        ("efficientnet_b0", {"width_coefficient": 0.25, "depth_coefficient": 0.1}, (2, 5)),
        ("bert-large", {"num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 2,
                        "intermediate_size": 32, "vocab_size": 50}, (2, 5)),
        ("gpt2", {"n_layer": 1, "n_embd": 16, "n_head": 2, "vocab_size": 50, "bos_token_id": 0,
                  "eos_token_id": 0}, (2, 8, 50)),
    ],
)
def test_small_configs_train_one_step(name, overrides, out_shape):
    m = models.build_model(name, num_classes=5, image_size=32, seq_len=8, config_overrides=overrides)
    x, y = models.example_batch(m, 2)
    out = m(x)
    assert tuple(out.shape) == out_shape
    loss = models.loss_fn(m)(out, y)
    loss.backward()
    assert all(p.grad is not None for p in m.parameters() if p.requires_grad)


def test_user_factory(tmp_path):
    f = tmp_path / "mine.py"
    f.write_text(textwrap.dedent("""
        import torch.nn as nn

        def make(num_classes=3, hidden=4):
            return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

        def not_a_module():
            return 42
    """))
    m = models.build_model(f"{f}:make", num_classes=7, image_size=8)
    assert m.ascendify_num_classes == 7 and m.ascendify_task == "image-classification"
    x, y = models.example_batch(m, 4)
    assert m(x).shape == (4, 7) and int(y.max()) < 7
    with pytest.raises(models.ModelError, match="returned int"):
        models.build_model(f"{f}:not_a_module")
    with pytest.raises(models.ModelError, match="no callable 'nope'"):
        models.build_model(f"{f}:nope")
    with pytest.raises(models.ModelError, match="no such file"):
        models.build_model(f"{tmp_path}/missing.py:make")


def test_user_factory_default_image_size_shapes_the_batch(tmp_path):
    """No --image-size: the factory's own default is the model's size (not 224, which its first Linear rejects)."""
    f = tmp_path / "sized.py"
    f.write_text(textwrap.dedent("""
        import torch.nn as nn

        def build(num_classes=10, image_size=16):
            return nn.Sequential(nn.Flatten(), nn.Linear(3 * image_size * image_size, num_classes))
    """))
    m = models.build_model(f"{f}:build")
    x, _ = models.example_batch(m, 2)
    assert tuple(x.shape) == (2, 3, 16, 16) and m(x).shape == (2, 10)
    m = models.build_model(f"{f}:build", image_size=8)  # given: it wins
    x, _ = models.example_batch(m, 2)
    assert tuple(x.shape) == (2, 3, 8, 8) and m(x).shape == (2, 10)
