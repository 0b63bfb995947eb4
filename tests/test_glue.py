"""GLUE processors: label sets, column layouts, BOM, headers, quoting off, malformed rows."""

import gzip
import pathlib

import pytest

from albert_tf.tasks.glue import processors as glue
from albert_tf.tasks.glue.processors import MalformedRowError, read_split

GLUE = pathlib.Path(__file__).parent / "fixtures" / "glue"


def test_task_table_is_the_original():
    assert sorted(glue.TASKS) == [
        "cola",
        "mismnli",
        "mnli",
        "mrpc",
        "qnli",
        "qqp",
        "rte",
        "sst-2",
        "sts-b",
        "wnli",
    ]
    labels = {name: task.labels for name, task in glue.TASKS.items()}
    assert labels["mnli"] == labels["mismnli"] == ("contradiction", "entailment", "neutral")
    assert labels["rte"] == labels["qnli"] == ("entailment", "not_entailment")
    for name in ("cola", "mrpc", "sst-2", "qqp", "wnli"):
        assert labels[name] == ("0", "1")
    assert labels["sts-b"] is None and glue.TASKS["sts-b"].num_labels == 1
    assert glue.TASKS["mismnli"].files["dev"] == "dev_mismatched.tsv"
    assert glue.TASKS["mnli"].files["dev"] == "dev_matched.tsv"
    assert glue.get_task("SST-2") is glue.TASKS["sst-2"]  # the original lowercases task_name
    with pytest.raises(ValueError, match="unknown GLUE task 'AX'"):
        glue.get_task("AX")


def test_sst2_header_skipped_text_verbatim():
    train = read_split("sst-2", GLUE, "train")
    assert len(train.examples) == 40 and not train.skipped
    first = train.examples[0]
    assert first.text_a == "hide new secretions from the parental units "  # raw; tokenizer cleans
    assert (first.label, first.text_b, first.guid, first.line) == ("0", None, "train-1", 2)
    assert {e.label for e in train.examples} == {"0", "1"}


def test_test_split_is_unlabelled_with_index_guids():
    test = read_split("sst-2", GLUE, "test")
    assert [e.guid for e in test.examples] == [str(i) for i in range(8)]
    assert all(e.label is None for e in test.examples)
    assert test.examples[0].text_a.startswith("the emotions are raw")


def test_mrpc_bom_header_and_unbalanced_quote():
    assert (GLUE / "MRPC" / "dev.tsv").read_bytes().startswith(b"\xef\xbb\xbfQuality\t")
    dev = read_split("mrpc", GLUE, "dev")
    assert len(dev.examples) == 8
    first = dev.examples[0]
    assert first.label == "1" and first.line == 2
    assert first.text_a.startswith("He said the foodservice pie business")
    # Quoting off: the lone opening quote stays, and the row does not swallow the next line.
    assert (
        first.text_b == '"The foodservice pie business does not fit our long-term growth strategy.'
    )


def test_rte_rows_starting_with_quotes():
    train = read_split("rte", GLUE, "train")
    assert len(train.examples) == 11
    quoted = [e for e in train.examples if e.text_a.startswith('"')]
    assert len(quoted) == 3
    assert quoted[2].text_a.startswith('"I will not seek your votes for a new mandate." With')
    assert {e.label for e in train.examples} == {"entailment", "not_entailment"}
    assert train.examples[0].guid == "0"  # RTE guids are the index column


def test_cola_has_no_header_and_no_final_newline():
    train = read_split("cola", GLUE, "train")
    assert len(train.examples) == 25  # every line is an example
    assert train.examples[0].guid == "train-0" and train.examples[0].line == 1
    assert train.examples[0].text_a.startswith("Our friends won't buy this analysis")
    assert {e.label for e in train.examples} == {"0", "1"}
    dev = read_split("cola", GLUE, "dev")
    assert not (GLUE / "CoLA" / "dev.tsv").read_bytes().endswith(b"\n")
    assert len(dev.examples) == 12 and dev.examples[-1].text_a.endswith(".")


def test_qnli_dev_keeps_non_ascii():
    dev = read_split("qnli", GLUE, "dev")
    assert len(dev.examples) == 8
    assert any("Temüjin" in e.text_a for e in dev.examples)
    assert dev.examples[0].text_a == "What came into force after the new constitution was herald?"


def _write(tmp_path, folder, name, lines):
    path = tmp_path / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# Synthetic rows in the GLUE layouts of the tasks absent from the data (headers as GLUE's files).
MNLI_TRAIN_HEADER = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
    "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label"
)
MNLI_DEV_HEADER = MNLI_TRAIN_HEADER.replace(
    "label1\tgold_label", "label1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label"
)


def test_mnli_layouts_train_and_both_dev_files(tmp_path):
    _write(
        tmp_path,
        "MNLI",
        "train.tsv",
        [
            MNLI_TRAIN_HEADER,
            "7\tp\tq\tfiction\tb1\tb2\tp1\tp2\tPremise .\tHypothesis .\tneutral\tneutral",
        ],
    )
    dev_row = "3\tp\tq\tslate\tb1\tb2\tp1\tp2\tA\tB\tneutral\tentailment\tneutral\tneutral\tneutral\tneutral"
    _write(tmp_path, "MNLI", "dev_matched.tsv", [MNLI_DEV_HEADER, dev_row])
    _write(
        tmp_path,
        "MNLI",
        "dev_mismatched.tsv",
        [MNLI_DEV_HEADER, dev_row.replace("\tA\tB\t", "\tC\tD\t")],
    )
    (train,) = read_split("mnli", tmp_path, "train").examples
    assert (train.guid, train.text_a, train.text_b, train.label) == (
        "7",
        "Premise .",
        "Hypothesis .",
        "neutral",
    )
    (matched,) = read_split("mnli", tmp_path, "dev").examples
    (mismatched,) = read_split("mismnli", tmp_path, "dev").examples
    assert (matched.text_a, matched.label) == ("A", "neutral")  # gold_label, the last column
    assert mismatched.text_a == "C"


def test_qqp_stsb_wnli_layouts(tmp_path):
    _write(
        tmp_path,
        "QQP",
        "dev.tsv",
        ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", "5\t11\t12\tHow?\tWhy?\t1"],
    )
    _write(
        tmp_path,
        "STS-B",
        "train.tsv",
        [
            "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
            "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane.\tAn air plane.\t5.000",
        ],
    )
    _write(
        tmp_path, "WNLI", "train.tsv", ["index\tsentence1\tsentence2\tlabel", "0\tI x.\tI y.\t1"]
    )
    (qqp,) = read_split("qqp", tmp_path, "dev").examples
    assert (qqp.guid, qqp.text_a, qqp.text_b, qqp.label) == ("5", "How?", "Why?", "1")
    (stsb,) = read_split("sts-b", tmp_path, "train").examples
    assert (stsb.text_a, stsb.text_b, stsb.label) == ("A plane.", "An air plane.", 5.0)
    assert isinstance(stsb.label, float)
    (wnli,) = read_split("wnli", tmp_path, "train").examples
    assert (wnli.text_a, wnli.text_b, wnli.label) == ("I x.", "I y.", "1")


def test_labels_go_through_preprocess_text_as_the_original(tmp_path):
    _write(
        tmp_path,
        "RTE",
        "dev.tsv",
        ["index\tsentence1\tsentence2\tlabel", "0\tA\tB\tEntailment ", "1\tA\tB\tnot_entailment"],
    )
    labels = [e.label for e in read_split("rte", tmp_path, "dev").examples]
    assert labels == ["entailment", "not_entailment"]
    with pytest.raises(MalformedRowError, match="unknown label 'Entailment '"):
        read_split("rte", tmp_path, "dev", do_lower_case=False)


def test_wrong_column_count_names_file_and_line(tmp_path):
    path = _write(
        tmp_path,
        "SST-2",
        "train.tsv",
        ["sentence\tlabel", "good .\t1", "a tab\tinside\t0", "bad .\t0"],
    )
    with pytest.raises(MalformedRowError) as error:
        read_split("sst-2", tmp_path, "train")
    message = str(error.value)
    assert message.startswith(f"{path}:3: expected 2 tab-separated columns, got 3")
    assert "skip_malformed_rows" in message


def test_unknown_label_names_file_and_line(tmp_path):
    path = _write(tmp_path, "CoLA", "dev.tsv", ["src\t1\t\tFine .", "src\t2\t*\tOdd ."])
    expected = rf"^{path}:2: unknown label '2'; cola labels are \['0', '1'\]"
    with pytest.raises(MalformedRowError, match=expected):
        read_split("cola", tmp_path, "dev")


def test_skip_malformed_rows_counts_and_keeps_good_rows(tmp_path):
    _write(
        tmp_path,
        "MRPC",
        "train.tsv",
        [
            "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String",
            "1\t1\t2\tA .\tB .",
            "1\t1\t2\tonly four",
            "x\t1\t2\tC .\tD .",
            "",
            "0\t3\t4\tE .\tF .",
        ],
    )
    result = read_split("mrpc", tmp_path, "train", skip_malformed_rows=True)
    assert [e.label for e in result.examples] == ["1", "0"]
    assert [line for line, _ in result.skipped] == [3, 4, 5]
    assert "got 4" in result.skipped[0][1] and "unknown label 'x'" in result.skipped[1][1]
    assert "got 1" in result.skipped[2][1]  # a blank line is a malformed row, not silently dropped


def test_stsb_label_must_be_a_finite_number(tmp_path):
    header = (
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    )
    _write(
        tmp_path,
        "STS-B",
        "dev.tsv",
        [header, "0\tg\tf\ty\to\ts\ts\tA\tB\thigh", "1\tg\tf\ty\to\ts\ts\tA\tB\tnan"],
    )
    with pytest.raises(MalformedRowError, match=r"dev.tsv:2: label 'high' is not a finite number"):
        read_split("sts-b", tmp_path, "dev")
    skipped = read_split("sts-b", tmp_path, "dev", skip_malformed_rows=True).skipped
    assert [line for line, _ in skipped] == [2, 3]


def test_invalid_utf8_and_wrong_task_header(tmp_path):
    path = tmp_path / "SST-2" / "dev.tsv"
    path.parent.mkdir()
    path.write_bytes(b"sentence\tlabel\nok\t1\n\xff\xfe\t0\n")
    with pytest.raises(MalformedRowError, match=rf"^{path}:3: not valid UTF-8"):
        read_split("sst-2", tmp_path, "dev")
    # An SST-2 file read as MRPC: the header is too narrow for MRPC's columns.
    (tmp_path / "MRPC").mkdir()
    (tmp_path / "MRPC" / "dev.tsv").write_text("sentence\tlabel\nok\t1\n")
    expected = r"dev.tsv:1: header has 2 columns, mrpc dev needs at least 5"
    with pytest.raises(MalformedRowError, match=expected):
        read_split("mrpc", tmp_path, "dev")


def test_data_dir_may_be_the_task_folder_and_missing_files_are_named(tmp_path):
    direct = read_split("sst-2", GLUE / "SST-2", "dev")
    assert len(direct.examples) == 16
    with pytest.raises(
        FileNotFoundError, match=r"qnli train file not found; tried .*QNLI/train.tsv"
    ):
        read_split("qnli", GLUE, "train")


def test_a_gzipped_split_reads_as_the_plain_one_and_plain_comes_first(tmp_path):
    (tmp_path / "MRPC").mkdir()
    plain = (GLUE / "MRPC" / "dev.tsv").read_bytes()  # with its UTF-8 BOM
    (tmp_path / "MRPC" / "dev.tsv.gz").write_bytes(gzip.compress(plain))
    zipped = read_split("mrpc", tmp_path, "dev")
    assert zipped.path.endswith("dev.tsv.gz")
    assert zipped.examples == read_split("mrpc", GLUE, "dev").examples
    # Where both are there, the plain file is read.
    (tmp_path / "MRPC" / "dev.tsv").write_bytes(plain)
    assert read_split("mrpc", tmp_path, "dev").path.endswith("dev.tsv")
    cut = tmp_path / "cut" / "MRPC"
    cut.mkdir(parents=True)
    (cut / "dev.tsv.gz").write_bytes(gzip.compress(plain)[: len(plain) // 8])
    # A cut archive is an error naming where it stopped, not a shorter split.
    with pytest.raises(MalformedRowError, match=r"MRPC/dev.tsv.gz:\d+: damaged gzip data"):
        read_split("mrpc", cut.parent, "dev")
