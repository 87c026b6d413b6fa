"""benchmarks/drill_lookup_bench.py: what counts as a grep finding a drill."""
from benchmarks.drill_lookup_bench import library_index, lookups


def test_lookups_count_verbatim_lines_and_greps_that_lead_home(tmp_path):
    home, other = tmp_path / "home.py", tmp_path / "other.py"
    home.write_text("def f(x):\n    return x.very_rare_attribute + 1\n")
    other.write_text("def g(options):\n    if options is not None:\n        return 'a long string constant'\n")
    index = library_index([home, other])
    renamed = lookups("def h(value):\n    return value.very_rare_attribute + 1\n", 0, index)
    assert renamed == {"any_line": False, "def_line": False, "line_leads_home": False, "string_leads_home": False,
                       "name_leads_home": True, "any_leads_home": True}  # the attribute is only in its file
    coincidence = lookups("def h(options):\n    if options is not None:\n        return 'a long string constant'\n",
                          0, index)
    assert coincidence["any_line"] and not coincidence["line_leads_home"] and not coincidence["string_leads_home"]
    assert lookups("def g(options):\n    return 0\n", 1, index)["def_line"]
