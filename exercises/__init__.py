"""Exercises: implement the course's algorithms yourself, and the measured solutions of every notebook's exercises."""
