from geometry.vector import cross, distance, sub


def area(points):
    """Absolute area by the shoelace formula."""
    total = 0
    for i in range(len(points)):
        j = (i + 1) % len(points)
        total += points[i][0] * points[j][1] - points[j][0] * points[i][1]
    return abs(total) / 2


def perimeter(points):
    return sum(distance(points[i], points[(i + 1) % len(points)]) for i in range(len(points)))


def bounding_box(points):
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    return (min(xs), min(ys), max(xs), max(ys))


def is_convex(points):
    """True when all turns have the same orientation (collinear points allowed)."""
    sign = 0
    n = len(points)
    for i in range(n):
        turn = cross(sub(points[(i + 1) % n], points[i]), sub(points[(i + 2) % n], points[(i + 1) % n]))
        if turn != 0:
            if sign == 0:
                sign = 1 if turn > 0 else -1
            elif (turn > 0) != (sign > 0):
                return False
    return True


def contains(points, p):
    """Ray casting; points on the boundary may go either way, so tests avoid them."""
    inside = False
    n = len(points)
    for i in range(n):
        (x1, y1), (x2, y2) = points[i], points[(i + 1) % n]
        if (y1 > p[1]) != (y2 > p[1]):
            x_cross = x1 + (p[1] - y1) * (x2 - x1) / (y2 - y1)
            if p[0] < x_cross:
                inside = not inside
    return inside
