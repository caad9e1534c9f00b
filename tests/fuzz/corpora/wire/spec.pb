
true(0