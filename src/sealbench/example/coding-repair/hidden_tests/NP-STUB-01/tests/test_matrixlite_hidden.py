import pytest

from matrixlite.matrix import determinant, identity, matmul, shape, transpose
from matrixlite.vector import add, dot, scale


def test_dot():
    assert dot([1, 2, 3], [4, 5, 6]) == 32
    assert dot([], []) == 0


def test_dot_rejects_unequal_lengths():
    with pytest.raises(ValueError):
        dot([1], [1, 2])


def test_add():
    assert add([1, 2], [3, 5]) == [4, 7]


def test_add_rejects_unequal_lengths():
    with pytest.raises(ValueError):
        add([1], [1, 2])


def test_scale():
    assert scale([1, -2], 3) == [3, -6]


def test_shape():
    assert shape([[1, 2, 3], [4, 5, 6]]) == (2, 3)
    assert shape([]) == (0, 0)


def test_identity():
    assert identity(1) == [[1]]
    assert identity(2) == [[1, 0], [0, 1]]
    assert identity(3)[1] == [0, 1, 0]


def test_transpose_of_a_square_matrix():
    assert transpose([[1, 2], [3, 4]]) == [[1, 3], [2, 4]]


def test_transpose_of_a_wide_matrix():
    assert transpose([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]


def test_transpose_of_a_tall_matrix():
    assert transpose([[1], [2], [3]]) == [[1, 2, 3]]


def test_matmul_of_square_matrices():
    assert matmul([[1, 2], [3, 4]], [[5, 6], [7, 8]]) == [[19, 22], [43, 50]]
    assert matmul([[2, 3], [4, 5]], identity(2)) == [[2, 3], [4, 5]]


def test_matmul_of_a_row_by_a_column():
    assert matmul([[1, 2, 3]], [[1], [2], [3]]) == [[14]]


def test_matmul_rejects_mismatched_shapes():
    with pytest.raises(ValueError):
        matmul([[1, 2]], [[1, 2]])


def test_determinant_of_one_by_one():
    assert determinant([[7]]) == 7


def test_determinant_of_two_by_two():
    assert determinant([[1, 2], [3, 4]]) == -2
    assert determinant([[2, 0], [0, 3]]) == 6


def test_determinant_of_three_by_three():
    assert determinant([[2, 0, 1], [1, 3, 2], [1, 1, 4]]) == 18
    assert determinant([[1, 2, 3], [4, 5, 6], [7, 8, 9]]) == 0
    assert determinant([[0, 1, 0], [1, 0, 0], [0, 0, 1]]) == -1


def test_determinant_of_four_by_four():
    m = [[1, 0, 2, -1], [3, 0, 0, 5], [2, 1, 4, -3], [1, 0, 5, 0]]
    assert determinant(m) == 30


def test_determinant_rejects_a_non_square_matrix():
    with pytest.raises(ValueError):
        determinant([[1, 2, 3], [4, 5, 6]])


def test_reported_behaviour():
    from matrixlite.vector import scale

    assert repr(scale([1, -2], 3)) == '[3, -6]'
