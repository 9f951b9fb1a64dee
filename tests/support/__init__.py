"""What the tests share: trace and store builders, page helpers, demo runners, paths. Test modules
import these (`from tests.support.x import ...`), never another test module."""
