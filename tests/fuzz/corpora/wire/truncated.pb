
a