from geometry.polygon import area, bounding_box, contains, is_convex, perimeter

SQUARE = [(0, 0), (4, 0), (4, 4), (0, 4)]
TRIANGLE = [(0, 0), (6, 0), (0, 3)]
ARROW = [(0, 0), (4, 2), (0, 4), (1, 2)]


def test_area():
    assert area(SQUARE) == 16
    assert area(TRIANGLE) == 9
    assert area(list(reversed(TRIANGLE))) == 9
    assert area(ARROW) == 6


def test_perimeter():
    assert perimeter(SQUARE) == 16
    assert abs(perimeter(TRIANGLE) - (6 + 3 + 45 ** 0.5)) < 1e-9


def test_bounding_box():
    assert bounding_box([(1, 5), (-2, 3), (4, -1)]) == (-2, -1, 4, 5)


def test_is_convex():
    assert is_convex(SQUARE)
    assert is_convex(list(reversed(SQUARE)))
    assert not is_convex(ARROW)
    assert is_convex([(0, 0), (2, 0), (4, 0), (4, 4), (0, 4)])


def test_contains():
    assert contains(SQUARE, (1, 1))
    assert not contains(SQUARE, (5, 1))
    assert not contains(SQUARE, (-1, 2))
    assert contains(ARROW, (3, 2))
    assert not contains(ARROW, (0.5, 2))
    assert contains(TRIANGLE, (1, 1))
    assert not contains(TRIANGLE, (4, 2))
