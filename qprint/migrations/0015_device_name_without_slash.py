"""A device's name holds no "/" (it is a segment of the device's URLs, docs/API.md): a validator
of the model field; the table does not change."""

import qprint.core.inputs
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("qprint", "0014_fewer_index_writes"),
    ]

    operations = [
        migrations.AlterField(
            model_name="device",
            name="name",
            field=models.CharField(
                max_length=150,
                validators=[qprint.core.inputs.validate_device_name],
                verbose_name="name",
            ),
        ),
    ]
