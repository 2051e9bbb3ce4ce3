from greeting import greet


def test_greet_says_hello():
    assert greet("Ada") == "Hello, Ada!"


def test_greet_names_the_user():
    assert "Grace" in greet("Grace")
