from globlite.match import filter_paths, match_path, match_segment
from globlite.paths import extension, normalize, split_path


def test_split_path():
    assert split_path("/a//b/./c/") == ["a", "b", "c"]
    assert split_path("/") == []


def test_normalize_collapses_parent_references():
    assert normalize("a/b/../c") == "a/c"
    assert normalize("a/b/c/../../d") == "a/d"


def test_normalize_removes_dots_and_repeated_slashes():
    assert normalize("/a/./b//c/") == "/a/b/c"


def test_normalize_keeps_leading_parent_references_of_relative_paths():
    assert normalize("../x") == "../x"
    assert normalize("../../x") == "../../x"
    assert normalize("a/../../x") == "../x"


def test_normalize_stops_at_the_root():
    assert normalize("/../x") == "/x"


def test_normalize_down_to_nothing():
    assert normalize("a/..") == "."
    assert normalize("") == "."
    assert normalize("/") == "/"


def test_extension():
    assert extension("src/app.tar.gz") == ".gz"
    assert extension("notes.txt") == ".txt"


def test_extension_of_a_name_without_a_dot():
    assert extension("README") == ""
    assert extension("") == ""


def test_dotfiles_have_no_extension():
    assert extension(".bashrc") == ""
    assert extension("home/.profile") == ""
    assert extension(".config.yaml") == ".yaml"


def test_match_segment_literally():
    assert match_segment("abc", "abc")
    assert not match_segment("abc", "abd")


def test_star_matches_any_run_of_characters():
    assert match_segment("*.py", "setup.py")
    assert not match_segment("*.py", "setup.pyc")


def test_star_matches_nothing_too():
    assert match_segment("a*", "a")
    assert match_segment("*", "")
    assert match_segment("*.py", ".py")


def test_question_mark_matches_exactly_one_character():
    assert match_segment("a?c", "abc")
    assert not match_segment("a?c", "ac")
    assert not match_segment("a?c", "abbc")


def test_match_path_segment_by_segment():
    assert match_path("src/*.py", "src/app.py")
    assert not match_path("src/*.py", "src/pkg/app.py")


def test_match_path_needs_the_whole_path():
    assert not match_path("a/b", "a")
    assert not match_path("a", "a/b")


def test_double_star_spans_directories():
    assert match_path("src/**/*.py", "src/pkg/sub/app.py")


def test_double_star_matches_zero_directories():
    assert match_path("src/**/*.py", "src/app.py")


def test_trailing_double_star_matches_everything_below():
    assert match_path("src/**", "src/a")
    assert match_path("src/**", "src/a/b.py")
    assert match_path("src/**", "src")
    assert match_path("**", "a/b")


def test_filter_paths():
    assert filter_paths("*.py", ["a.py", "b.txt", "c.py"]) == ["a.py", "c.py"]


def test_reported_behaviour():
    from globlite.paths import normalize

    assert repr(normalize("a/b/../c")) == "'a/c'"
