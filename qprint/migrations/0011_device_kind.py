from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('qprint', '0006_auth_failures'),
    ]

    operations = [
        migrations.AddField(
            model_name='device',
            name='kind',
            field=models.CharField(choices=[('agent', 'print agent'), ('cloudprnt', 'CloudPRNT printer')], default='agent', help_text='How the device reaches the server; set when the device is made.', max_length=20, verbose_name='kind'),
        ),
        migrations.AddField(
            model_name='device',
            name='printer_mac',
            field=models.CharField(blank=True, default='', max_length=32, verbose_name='printer MAC'),
        ),
        migrations.AddIndex(
            model_name='printjob',
            index=models.Index(condition=models.Q(('status', 'RECEIVED')), fields=['received_at'], name='qprint_job_received_at_idx'),
        ),
    ]
