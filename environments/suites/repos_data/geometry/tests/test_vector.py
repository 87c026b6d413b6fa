from geometry.vector import add, cross, distance, dot, norm, rotate90, sub


def test_add_sub():
    assert add((1, 2), (3, 5)) == (4, 7)
    assert sub((1, 2), (3, 5)) == (-2, -3)


def test_dot_cross():
    assert dot((1, 2), (3, 4)) == 11
    assert cross((1, 0), (0, 1)) == 1
    assert cross((2, 3), (4, 5)) == -2


def test_norm_distance():
    assert norm((3, 4)) == 5.0
    assert distance((1, 1), (4, 5)) == 5.0


def test_rotate90():
    assert rotate90((1, 0)) == (0, 1)
    assert rotate90((2, 3)) == (-3, 2)
