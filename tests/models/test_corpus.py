import pytest

from service.models import corpus
from service.models.corpus import DOC_SEPARATOR, CorpusConfig, Document, is_heldout, read_split, write_corpus


def _fake_documents(config):
    for domain in corpus.DOMAINS:
        for i in range(40):
            yield Document(domain, f"{domain}:{i}", f"{domain} document {i} " * 5)


def test_heldout_split_is_deterministic_and_near_the_fraction():
    names = [f"file{i}.py" for i in range(4000)]
    first = [is_heldout(n, 0, 0.1) for n in names]
    assert first == [is_heldout(n, 0, 0.1) for n in names]
    assert first != [is_heldout(n, 1, 0.1) for n in names]
    assert 0.08 < sum(first) / len(first) < 0.12


def test_write_corpus_splits_by_document_and_is_reproducible(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "build_documents", _fake_documents)
    config = CorpusConfig(seed=0, heldout_fraction=0.2)
    write_corpus(config, tmp_path / "a")
    manifest = write_corpus(config, tmp_path / "b")
    for domain in corpus.DOMAINS:
        for split in ("train", "heldout"):
            assert (tmp_path / "a" / domain / f"{split}.txt").read_bytes() == (
                tmp_path / "b" / domain / f"{split}.txt"
            ).read_bytes()
        train, heldout = read_split(tmp_path / "a", domain, "train"), read_split(tmp_path / "a", domain, "heldout")
        assert len(train) + len(heldout) == 40
        assert not set(train) & set(heldout)  # a document is never in both
        assert manifest["domains"][domain]["heldout"]["documents"] == len(heldout)
    assert DOC_SEPARATOR not in read_split(tmp_path / "a", "python", "train")[0]


def test_python_documents_exclude_tests(tmp_path):
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "decoder.py").write_text("x = 1\n")
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "support.py").write_text("y = 2\n")
    (tmp_path / "test_mod.py").write_text("z = 3\n")
    names = [d.name for d in corpus.python_documents(tmp_path)]
    assert names == ["json/decoder.py"]


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1])
def test_bad_heldout_fraction_is_rejected(tmp_path, fraction):
    with pytest.raises(ValueError):
        write_corpus(CorpusConfig(heldout_fraction=fraction), tmp_path)


def test_read_split_unknown_domain(tmp_path):
    with pytest.raises(ValueError):
        read_split(tmp_path, "poetry", "train")
