import math


def add(a, b):
    return (a[0] + b[0], a[1] + b[1])


def sub(a, b):
    return (a[0] - b[0], a[1] - b[1])


def dot(a, b):
    return a[0] * b[0] + a[1] * b[1]


def cross(a, b):
    """z-component of the 3-D cross product; positive when b is counter-clockwise of a."""
    return a[0] * b[1] - a[1] * b[0]


def norm(a):
    return math.sqrt(dot(a, a))


def distance(a, b):
    return norm(sub(a, b))


def rotate90(a):
    """Rotate counter-clockwise by 90 degrees."""
    return (-a[1], a[0])
